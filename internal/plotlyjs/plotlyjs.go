// Package plotlyjs embeds plotly.js (the npm package plotly.js-dist-min,
// vendored here with its MIT LICENSE; see README.md for the version and how
// to update it), so that plotly charts render on machines without internet:
// the figures a sandbox returns (plotly.py's to_html with
// include_plotlyjs="cdn") would otherwise load it from plotly's CDN.
package plotlyjs

import (
	_ "embed"
	"regexp"
	"strings"
)

// Version is the vendored plotly.js-dist-min version.
const Version = "4.1.2"

// JS is plotly.min.js.
//
//go:embed plotly.min.js
var JS []byte

// License is plotly.js's license, to be shipped with JS.
//
//go:embed LICENSE
var License string

// cdnScript matches the script tag plotly's to_html(include_plotlyjs="cdn")
// writes (and any other script loaded from plotly's CDN).
var cdnScript = regexp.MustCompile(`(?i)<script[^>]*\ssrc="https?://cdn\.plot\.ly/[^"]*"[^>]*>\s*</script>`)

// StripCDN removes the script tags that load plotly.js from its CDN.
func StripCDN(html string) string { return cdnScript.ReplaceAllString(html, "") }

// Fallback is HTML (a hidden message and a script) to put after a chart: if
// the page has a plotly chart that did not draw (plotly.js missing, or a
// figure it cannot read), the message shows instead of a blank box.
const Fallback = `<div id="plotly-fallback" hidden style="font:14px system-ui,sans-serif;color:#8a5a00;background:#fff8e6;border:1px solid #f3dfa6;border-radius:8px;padding:10px 12px;margin:8px">This chart could not be drawn (plotly.js did not load, or it could not read the figure).</div>
<script>(function(){function check(){var drawn=typeof Plotly!=="undefined"&&document.querySelector(".js-plotly-plot .main-svg");if(!drawn)document.getElementById("plotly-fallback").hidden=false;}if(document.readyState==="complete")check();else window.addEventListener("load",check);})();</script>`

// Standalone returns a complete, self-contained HTML document for a chart
// fragment (plotly's to_html output): plotly.js inlined instead of loaded
// from the CDN, so the file opens offline. Its license header stays in the
// inlined script.
func Standalone(title, fragment string) []byte {
	var b strings.Builder
	b.Grow(len(JS) + len(fragment) + 1024)
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>`)
	b.WriteString(htmlEscape(title))
	b.WriteString(`</title><script>`)
	// A "</script" inside the library would end the tag early; plotly.min.js
	// has none, but escape it anyway, as JS allows.
	b.WriteString(strings.ReplaceAll(string(JS), "</script", `<\/script`))
	b.WriteString("</script><style>html,body{margin:0;background:#fff}</style></head><body>")
	b.WriteString(strings.TrimSpace(StripCDN(fragment)))
	b.WriteString(Fallback)
	b.WriteString("</body></html>\n")
	return []byte(b.String())
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
