package analytics

import (
	"unicode"
	"unicode/utf8"
)

// blankID reports whether id counts as absent (R65): it is empty, or every
// rune in it is white space (unicode.IsSpace, which covers the Unicode
// spaces such as U+00A0 and U+3000), not printable (format characters
// such as U+200B ZERO WIDTH SPACE and U+FEFF, controls), or one of the
// printable fillers that render as nothing (invisibleFiller). Servers trim
// and clean ids this way before they check that an event has one, and then
// refuse the whole request. It allocates nothing, and an id that starts
// with a visible ASCII character is decided by its first byte.
func blankID(id string) bool {
	for i := 0; i < len(id); {
		c := id[i]
		if c > ' ' && c < utf8.RuneSelf && c != 0x7f {
			return false // visible ASCII
		}
		r, size := utf8.DecodeRuneInString(id[i:])
		i += size
		if r == utf8.RuneError && size == 1 {
			return false // invalid UTF-8 goes out as U+FFFD, which is visible
		}
		if !unicode.IsSpace(r) && unicode.IsPrint(r) && !invisibleFiller(r) {
			return false
		}
	}
	return true
}

// invisibleFiller lists the runes that unicode.IsPrint accepts but that
// render as nothing: fillers and blank patterns.
func invisibleFiller(r rune) bool {
	switch r {
	case '\u034F', // COMBINING GRAPHEME JOINER
		'\u115F', '\u1160', // HANGUL CHOSEONG, JUNGSEONG FILLER
		'\u17B4', '\u17B5', // KHMER VOWEL INHERENT AQ, AA
		'\u2800', // BRAILLE PATTERN BLANK
		'\u3164', // HANGUL FILLER
		'\uFFA0': // HALFWIDTH HANGUL FILLER
		return true
	}
	return false
}
