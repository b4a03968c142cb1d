package difftest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v33prog "github.com/relaykit/analytics-go/segmentv3/difftest/internal/v33prog"
)

const v33Path = "github.com/segmentio/analytics-go/v3"

// TestV33ProgramCompiles builds the v3.3.0 program (internal/v33prog) with
// only its import line changed to the compatibility package, in a
// temporary module that replaces this SDK by the working tree, and runs
// it against a loopback server: its events carry context.direct and
// context.groupId.
func TestV33ProgramCompiles(t *testing.T) {
	code, err := os.ReadFile("internal/v33prog/program.go")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(code), `"`+v33Path+`"`))
	swapped := strings.Replace(string(code), `"`+v33Path+`"`, `"`+compatPath+`"`, 1)
	swapped = strings.Replace(swapped, "package program", "package main", 1)
	swapped += `
func main() {
	invalid, custom, closeErr := Run(os.Args[1], nil)
	for _, err := range invalid {
		fmt.Println("invalid:", err)
	}
	fmt.Println("custom:", custom)
	fmt.Println("close:", closeErr)
}
`
	swapped = strings.Replace(swapped, "import (\n", "import (\n\t\"fmt\"\n\t\"os\"\n", 1)

	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	mod := t.TempDir()
	goMod := "module v33program\n\ngo 1.25\n\nrequire github.com/relaykit/analytics-go v0.0.0\n\n" +
		"replace github.com/relaykit/analytics-go => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), []byte(swapped), 0o644))
	bin := filepath.Join(mod, "program")
	build := exec.Command(goTool(t), "build", "-o", bin, ".")
	build.Dir = mod
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the v3.3.0 program must compile against %s:\n%s", compatPath, out)

	var mu sync.Mutex
	var bodies []map[string]interface{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]interface{}
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
	}))
	defer srv.Close()
	run := exec.Command(bin, srv.URL)
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)

	// The same program with v3.3.0 itself prints the same lines.
	invalid, custom, closeErr := v33prog.Run(srv.URL, &http.Transport{})
	var want strings.Builder
	for _, err := range invalid {
		want.WriteString("invalid: " + err.Error() + "\n")
	}
	// The copy is package main, so the type's name differs by its package.
	want.WriteString("custom: " + strings.Replace(custom.Error(), "program.event", "main.event", 1) + "\n")
	want.WriteString("close: <nil>\n")
	require.NoError(t, closeErr)
	assert.Equal(t, want.String(), string(out))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, bodies, 2, "one request from each run")
	for _, body := range bodies {
		batch := body["batch"].([]interface{})
		require.Len(t, batch, 1)
		assert.Equal(t, map[string]interface{}{"direct": true, "groupId": "team-7"}, batch[0].(map[string]interface{})["context"])
	}
}
