package difftest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// surface returns the exported API of the package in dir, one entry per
// identifier: "const X", "func New(string) Client",
// "method (Context) MarshalJSON() ([]byte, error)",
// "field Track.UserId string `json:\"userId,omitempty\"`",
// "type Properties map[string]interface{}", "iface Client.Enqueue(Message) error", ….
func surface(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					out["func "+d.Name.Name+signature(d.Type)] = true
				} else if recv := types.ExprString(d.Recv.List[0].Type); ast.IsExported(strings.TrimPrefix(recv, "*")) {
					out["method ("+types.ExprString(d.Recv.List[0].Type)+") "+d.Name.Name+signature(d.Type)] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out[d.Tok.String()+" "+n.Name] = true
							}
						}
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							typeSurface(out, s)
						}
					}
				}
			}
		}
	}
	return out
}

func typeSurface(out map[string]bool, s *ast.TypeSpec) {
	switch ty := s.Type.(type) {
	case *ast.StructType:
		out["type "+s.Name.Name+" struct"] = true
		for _, f := range ty.Fields.List {
			tag := ""
			if f.Tag != nil {
				tag = " " + f.Tag.Value
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out["field "+s.Name.Name+"."+n.Name+" "+types.ExprString(f.Type)+tag] = true
				}
			}
		}
	case *ast.InterfaceType:
		out["type "+s.Name.Name+" interface"] = true
		for _, m := range ty.Methods.List {
			if len(m.Names) == 0 {
				out["iface "+s.Name.Name+" embeds "+types.ExprString(m.Type)] = true
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					out["iface "+s.Name.Name+"."+n.Name+signature(m.Type.(*ast.FuncType))] = true
				}
			}
		}
	default:
		out["type "+s.Name.Name+" "+types.ExprString(s.Type)] = true
	}
}

// signature prints a function type without parameter names.
func signature(f *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		var ts []string
		if fl == nil {
			return ts
		}
		for _, p := range fl.List {
			n := max(len(p.Names), 1)
			for range n {
				ts = append(ts, types.ExprString(p.Type))
			}
		}
		return ts
	}
	s := "(" + strings.Join(list(f.Params), ", ") + ")"
	if r := list(f.Results); len(r) == 1 {
		s += " " + r[0]
	} else if len(r) > 1 {
		s += " (" + strings.Join(r, ", ") + ")"
	}
	return s
}

// TestSameAPIAsV3 compares the exported API of v3 (v3.1.0 from gopkg.in
// and v3.3.0 from github.com/segmentio/analytics-go/v3) with that of the
// compatibility package, declaration by declaration: names, parameter and
// result types, struct fields with their JSON tags, interface methods.
// Every v3 identifier must be there, identical; the exceptions and the
// additions are the ones docs/migrating-from-segment-v3.md lists.
func TestSameAPIAsV3(t *testing.T) {
	additions := []string{
		"const DefaultCloseTimeout",
		"field Config.CloseTimeout time.Duration",
		"field Config.DrainOnClose bool",
		"field Config.NativeOptions []native.Option",
		"field Product.SKU string `json:\"sku,omitempty\"`",
	}
	v33Additions := []string{
		"field Context.Direct bool `json:\"direct,omitempty\"`",
		"field Context.GroupID string `json:\"groupId,omitempty\"`",
		"func ValidateFields(FieldGetter) error",
		"iface FieldGetter.GetField(string) (interface{}, bool)",
		"type FieldGetter interface",
	}
	for _, tc := range []struct {
		path  string
		extra []string
	}{
		{v3Path, append(append([]string(nil), additions...), v33Additions...)},
		{v33Path, additions},
	} {
		t.Run(tc.path, func(t *testing.T) {
			v3 := surface(t, moduleDir(t, tc.path))
			compat := surface(t, "..")
			require.Greater(t, len(v3), 150, "v3's API was read")

			var missing, extra []string
			for k := range v3 {
				if !compat[k] {
					missing = append(missing, k)
				}
			}
			for k := range compat {
				if !v3[k] {
					extra = append(extra, k)
				}
			}
			sort.Strings(missing)
			sort.Strings(extra)
			want := append([]string(nil), tc.extra...)
			sort.Strings(want)
			assert.Equal(t, []string{
				"field Product.SKU string `json:\"sky,omitempty\"`", // sent as "sku": documented
			}, missing, "v3 declarations the compatibility package lacks or changes")
			assert.Equal(t, want, extra, "additions to v3's API")
			assert.True(t, reflect.DeepEqual(len(v3)-len(missing), len(compat)-len(extra)))
		})
	}
}
