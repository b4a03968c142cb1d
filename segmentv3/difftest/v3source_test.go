package difftest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	v3Path     = "gopkg.in/segmentio/analytics-go.v3"
	compatPath = "github.com/relaykit/analytics-go/segmentv3"
)

// goTool returns the go command (go test puts its own toolchain first in
// PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to locate and build v3's sources")
	return p
}

// v3Dir returns the directory of v3.1.0's source in the module cache.
func v3Dir(t *testing.T) string { return moduleDir(t, v3Path) }

// moduleDir returns the directory of a required module's source in the
// module cache, downloading it if needed (go mod download).
func moduleDir(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), "mod", "download", "-json", path)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	require.NoError(t, err, "go mod download %s: %s", path, out)
	var info struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &info), "%s", out)
	require.DirExists(t, info.Dir)
	return info.Dir
}

// TestSameProgram checks that the two copies of the program the
// differential test runs differ only in their import line.
func TestSameProgram(t *testing.T) {
	a, err := os.ReadFile("internal/v3prog/program.go")
	require.NoError(t, err)
	b, err := os.ReadFile("internal/compatprog/program.go")
	require.NoError(t, err)
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	require.Equal(t, len(al), len(bl))
	var changed []string
	for i := range al {
		if al[i] != bl[i] {
			changed = append(changed, al[i]+" -> "+bl[i])
		}
	}
	require.Equal(t, []string{
		`	analytics "` + v3Path + `" -> 	analytics "` + compatPath + `"`,
	}, changed)
}

// TestV3SnippetsCompile builds v3 v3.1.0's own example program
// (examples/track.go) and the Go blocks of its Readme.md against the
// compatibility package, with only the import line changed, in a
// temporary module that replaces this SDK by the working tree.
func TestV3SnippetsCompile(t *testing.T) {
	src := v3Dir(t)
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)

	programs := map[string][]byte{}
	example, err := os.ReadFile(filepath.Join(src, "examples", "track.go"))
	require.NoError(t, err)
	programs["example_track"] = example
	readme, err := os.ReadFile(filepath.Join(src, "Readme.md"))
	require.NoError(t, err)
	blocks := goBlocks(string(readme))
	require.NotEmpty(t, blocks, "Readme.md has Go examples")
	for i, b := range blocks {
		programs["readme_"+string(rune('a'+i))] = []byte(b)
	}

	mod := t.TempDir()
	goMod := "module v3snippets\n\ngo 1.25\n\nrequire github.com/relaykit/analytics-go v0.0.0\n\n" +
		"replace github.com/relaykit/analytics-go => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))
	for name, code := range programs {
		// v3's examples import it by its GitHub path.
		n := bytes.Count(code, []byte(`"github.com/segmentio/analytics-go"`)) + bytes.Count(code, []byte(`"`+v3Path+`"`))
		require.Equal(t, 1, n, "%s imports v3 once", name)
		code = bytes.Replace(code, []byte(`"github.com/segmentio/analytics-go"`), []byte(`"`+compatPath+`"`), 1)
		code = bytes.Replace(code, []byte(`"`+v3Path+`"`), []byte(`"`+compatPath+`"`), 1)
		dir := filepath.Join(mod, name)
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), code, 0o644))
	}
	cmd := exec.Command(goTool(t), "build", "-o", os.DevNull, "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "v3's examples must compile against %s:\n%s", compatPath, out)
	require.Len(t, programs, 1+len(blocks))
}

// goBlocks returns the fenced ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	for {
		i := strings.Index(md, "```go\n")
		if i < 0 {
			return blocks
		}
		md = md[i+len("```go\n"):]
		j := strings.Index(md, "```")
		if j < 0 {
			return blocks
		}
		blocks = append(blocks, md[:j])
		md = md[j:]
	}
}
