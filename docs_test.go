package analytics

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
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
	// 65 + 7 rules (R1–R72), 32 decisions, 54 + 4 scenarios, 5 unit checks, 7 invariants.
	if len(defined) != 72+32+58+5+7 {
		t.Errorf("docs/delivery.md defines %d ids, want %d", len(defined), 72+32+58+5+7)
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

// Relative links in the Markdown files point at files of the repository,
// and a link's #fragment at a heading of the Markdown file it names (as
// GitHub makes anchors of headings), so moving a section cannot leave a
// dangling link behind.
func TestDocLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	files := append(repoFiles(t), filepath.Join("docs", "delivery.md"))
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(text))
		return anchors[path]
	}
	checked := 0
	for _, path := range files {
		if filepath.Ext(path) != ".md" {
			continue
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			resolved := path
			if file != "" {
				resolved = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s links to %s, which does not exist", path, target)
					continue
				}
			}
			checked++
			if frag != "" && filepath.Ext(resolved) == ".md" && !anchorsOf(filepath.Clean(resolved))[frag] {
				t.Errorf("%s links to %s, but %s has no heading with the anchor #%s", path, target, resolved, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: is the link pattern still right?", checked)
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, spaces to hyphens, punctuation other than
// hyphens and underscores dropped, "-1", "-2", … for repeats.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripCode(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// stripCode blanks fenced code blocks, whose lines are neither headings
// nor links.
func stripCode(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// The README is a page a newcomer reads to the end: the reference lives in
// docs/.
func TestREADMEIsShort(t *testing.T) {
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(text))); n > 3000 {
		t.Errorf("README.md has %d words, want at most 3 000: move reference material to docs/", n)
	}
}
