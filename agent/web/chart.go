package web

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/agent/session"
)

// plotlyCandidates are where plotly.min.js is found on Debian-like systems:
// the Python package's own copy (pip installs keep it; Debian's
// python3-plotly strips it), and R's plotly package (r-cran-plotly).
var plotlyCandidates = []string{
	"/usr/lib/python3/dist-packages/plotly/package_data/plotly.min.js",
	"/usr/local/lib/python3*/dist-packages/plotly/package_data/plotly.min.js",
	"/usr/local/lib/python3*/site-packages/plotly/package_data/plotly.min.js",
	"/usr/lib/R/site-library/plotly/htmlwidgets/lib/plotlyjs/plotly-latest.min.js",
	"/usr/share/javascript/plotly/plotly.min.js",
}

// FindPlotlyJS returns the path of a local plotly.min.js, or "".
func FindPlotlyJS() string {
	for _, pattern := range plotlyCandidates {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
				return m
			}
		}
	}
	return ""
}

// cdnScript is the script tag plotly's to_html(include_plotlyjs="cdn")
// writes.
var cdnScript = regexp.MustCompile(`<script[^>]*src="https://cdn\.plot\.ly/[^"]*"[^>]*>\s*</script>`)

// chart serves a plotly chart as a page of its own, for an iframe. The
// HTML comes from code in the sandbox, so it is served as a sandboxed
// document (its own opaque origin: no cookies, no access to this site).
func (s *Server) chart(w http.ResponseWriter, r *http.Request) {
	data, _, ok := s.artifact(w, r, session.ArtifactChart)
	if !ok {
		return
	}
	html := string(data)
	head := ""
	if s.plotly != nil {
		html = cdnScript.ReplaceAllString(html, "")
		head = `<script src="/static/plotly.min.js"></script>`
	}
	self := "http://" + r.Host
	if r.TLS != nil {
		self = "https://" + r.Host
	}
	w.Header().Set("Content-Security-Policy", "sandbox allow-scripts; default-src 'none'; "+
		"script-src 'unsafe-inline' 'unsafe-eval' "+self+" https://cdn.plot.ly; style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(`<!doctype html><html><head><meta charset="utf-8">` + head +
		`<style>html,body{margin:0;height:100%;background:#fff}</style></head><body>` + strings.TrimSpace(html) + `</body></html>`))
}
