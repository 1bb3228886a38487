package admission

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Reasons lists every Reason constant: a watch refuses a reason it does not
// list, so one added to the constants alone could not be watched for.
func TestReasonsListsEveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "program.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				n++
				if !slices.Contains(Reasons, v) {
					t.Errorf("%s (%q) is not in Reasons", name.Name, v)
				}
			}
		}
	}
	if n != len(Reasons) {
		t.Errorf("%d Reason constants, %d Reasons", n, len(Reasons))
	}
}
