package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	fence   = regexp.MustCompile("(?s)```.*?```")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.*)$`)
	unslug  = regexp.MustCompile(`[^\p{L}\p{N}\- ]`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped,
// spaces as hyphens.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = strings.NewReplacer("`", "", "*", "", "_", "").Replace(h)
	return strings.ReplaceAll(unslug.ReplaceAllString(h, ""), " ", "-")
}

func TestRelativeLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		if b, err := os.ReadFile(path); err == nil {
			for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
				a[slug(m[1])] = true
			}
		}
		anchors[path] = a
		return a
	}
	var files, links int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s: link %s: no such file", path, target)
				continue
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", path, target, dest, frag)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 || links < 50 {
		t.Fatalf("checked %d links in %d Markdown files; the walk no longer finds the docs", links, files)
	}
}
