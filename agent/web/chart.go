package web

import (
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/internal/plotlyjs"
)

// chart serves a plotly chart as a page of its own, for an iframe. The
// HTML comes from code in the sandbox, so it is served as a sandboxed
// document (its own opaque origin: no cookies, no access to this site).
// plotly.js comes from this server (embedded in the binary), never from
// the CDN, so charts draw offline; a chart that cannot draw says so.
func (s *Server) chart(w http.ResponseWriter, r *http.Request) {
	data, _, ok := s.artifact(w, r, session.ArtifactChart)
	if !ok {
		return
	}
	html := plotlyjs.StripCDN(string(data))
	self := "http://" + r.Host
	if r.TLS != nil {
		self = "https://" + r.Host
	}
	w.Header().Set("Content-Security-Policy", "sandbox allow-scripts; default-src 'none'; "+
		"script-src 'unsafe-inline' 'unsafe-eval' "+self+"; style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write([]byte(`<!doctype html><html><head><meta charset="utf-8"><script src="/static/plotly.min.js"></script>` +
		`<style>html,body{margin:0;height:100%;background:#fff}</style></head><body>` + strings.TrimSpace(html) + plotlyjs.Fallback + `</body></html>`))
}
