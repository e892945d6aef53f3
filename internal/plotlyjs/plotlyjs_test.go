package plotlyjs

import (
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.Contains(string(JS[:200]), "plotly.js v"+Version) {
		t.Errorf("plotly.min.js does not start with the v%s banner: %q", Version, JS[:100])
	}
	if !strings.Contains(License, "MIT") && !strings.Contains(License, "Permission is hereby granted") {
		t.Errorf("LICENSE is not plotly's MIT license: %q", License)
	}
}

func TestStandalone(t *testing.T) {
	frag := `<div id="c"></div><script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script src="https://cdn.plot.ly/plotly-2.6.3.min.js"></script><script>Plotly.newPlot("c", [])</script>`
	page := string(Standalone(`a <b> chart`, frag))
	if strings.Contains(page, "cdn.plot.ly/plotly-") {
		t.Error("the CDN script tag is still there")
	}
	if !strings.Contains(page, "plotly.js v"+Version) || !strings.Contains(page, `Plotly.newPlot("c", [])`) {
		t.Error("the page lacks the inlined plotly.js or the figure")
	}
	if !strings.Contains(page, "<title>a &lt;b&gt; chart</title>") || !strings.Contains(page, "plotly-fallback") {
		t.Error("title not escaped or fallback missing")
	}
}
