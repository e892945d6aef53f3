package docker

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestTemplateDockerfile: the spec's steps in order, quoted so that no
// value can add a step; sandboxd's last layer after everything the
// template does.
func TestTemplateDockerfile(t *testing.T) {
	df := templateDockerfile("sha256:abc", core.TemplateSpec{
		Packages: []string{"jq", "curl"},
		Files:    []core.TemplateFile{{SHA256: strings.Repeat("a", 64), Dest: "/opt/x y"}},
		Env:      map[string]string{"B": "2", "A": "1\nRUN evil"},
		Workdir:  "/opt",
		Run:      []string{"echo \"hi\" > /opt/f\nRUN evil"},
	})
	lines := strings.Split(strings.TrimSpace(df), "\n")
	if lines[0] != "FROM sha256:abc AS base" || lines[len(lines)-1] != `CMD ["--io", "/io", "--workspace", "/workspace"]` {
		t.Errorf("the Dockerfile's ends:\n%s", df)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "RUN evil") {
			t.Errorf("a value added a step:\n%s", df)
		}
	}
	if !strings.Contains(df, "install -y --no-install-recommends curl jq") {
		t.Errorf("packages not sorted into one install:\n%s", df)
	}
	iEnvA, iEnvB := strings.Index(df, "ENV A="), strings.Index(df, "ENV B=")
	iUser := strings.LastIndex(df, "USER 1000:1000")
	iDriver := strings.Index(df, "COPY --from=base /usr/local/bin/sandbox-driver")
	iRun := strings.Index(df, `RUN ["/bin/sh", "-c", "echo`)
	if iEnvA < 0 || iEnvB < iEnvA || iRun < iEnvB || iDriver < iRun || iUser < iDriver {
		t.Errorf("the steps are out of order:\n%s", df)
	}
}
