package analytics

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// contractIDs are the identifiers of docs/delivery.md: rules, decisions,
// scenarios, unit checks and invariants.
var contractIDs = regexp.MustCompile(`\b(R[0-9]{1,2}|D[0-9]{1,2}|S[0-9]{1,2}[bc]?|U[0-9]|INV[0-9])\b`)

// definedIDs returns the ids docs/delivery.md defines: a rule, scenario,
// unit check or invariant is defined where its id starts a bold run
// ("**R12 —", "- **S25b …", "- **U1**"), a decision where it starts a table
// row ("| D7 |").
func definedIDs(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("docs", "delivery.md"))
	if err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`(?m)\*\*(R[0-9]+|S[0-9]+[bc]?|U[0-9]|INV[0-9])\b|^\| (D[0-9]+) \|`)
	ids := map[string]bool{}
	for _, m := range def.FindAllStringSubmatch(string(doc), -1) {
		id := m[1] + m[2]
		if ids[id] {
			t.Errorf("docs/delivery.md defines %s twice", id)
		}
		ids[id] = true
	}
	return ids
}

// repoFiles returns the repository's Go, Markdown and shell files outside
// docs/delivery.md itself and outside node_modules.
func repoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || (strings.HasPrefix(name, ".") && path != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh":
			if path != filepath.Join("docs", "delivery.md") {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every rule, decision, scenario, unit check and invariant that a comment,
// a test or a README cites must be defined in docs/delivery.md, so a reader
// of the repository can look it up.
func TestContractIDsResolve(t *testing.T) {
	defined := definedIDs(t)
	// 64 rules, 28 decisions, 54 + 4 scenarios, 5 unit checks, 7 invariants.
	if len(defined) != 64+28+58+5+7 {
		t.Errorf("docs/delivery.md defines %d ids, want %d", len(defined), 64+28+58+5+7)
	}
	for _, path := range repoFiles(t) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		for _, id := range contractIDs.FindAllString(string(text), -1) {
			if !defined[id] && !slices.Contains(missing, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s cites %v, which docs/delivery.md does not define", path, missing)
		}
	}
}

// Relative links in the Markdown files point at files of the repository.
func TestDocLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, path := range repoFiles(t) {
		if filepath.Ext(path) != ".md" {
			continue
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", path, m[1])
			}
		}
	}
	// docs/delivery.md is skipped by repoFiles; check its links too.
	text, err := os.ReadFile(filepath.Join("docs", "delivery.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range link.FindAllStringSubmatch(string(text), -1) {
		target, _, _ := strings.Cut(m[1], "#")
		if target == "" || strings.Contains(target, "://") {
			continue
		}
		if _, err := os.Stat(filepath.Join("docs", target)); err != nil {
			t.Errorf("docs/delivery.md links to %s, which does not exist", m[1])
		}
	}
}
