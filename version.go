package analytics

// LibraryName is the name the client reports in context.library.name and
// in the User-Agent header.
const LibraryName = "relaykit-analytics-go"

// Version is the release of this module. It is sent in
// context.library.version and the User-Agent header, and equals the newest
// release heading of CHANGELOG.md (a test checks it).
const Version = "0.1.0"

// DefaultEndpoint is the tracking API the client sends to (see
// WithEndpoint).
const DefaultEndpoint = "https://api.segment.io"
