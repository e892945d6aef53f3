package docker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// WORK IN PROGRESS (branch templates): how a template's image is built.
// A template is a Dockerfile sandboxd writes from its spec (never one a
// caller wrote): FROM the base image by ID, the packages, the files (from
// the build context, named by their hash), the env and the commands as
// root; then sandboxd's own last layer: the driver and the io sidecar
// copied again from the base image and the user, working directory,
// entrypoint and command set back, so no template step can replace what
// runs the sandbox.

// templateDockerfile writes the Dockerfile of spec over the image
// baseImage (an image ID). Files are expected in the build context as
// files/<sha256>.
func templateDockerfile(baseImage string, spec core.TemplateSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s AS base\nFROM %s\nUSER 0:0\n", baseImage, baseImage)
	if spec.Workdir != "" {
		fmt.Fprintf(&b, "WORKDIR %s\n", jsonQuote(spec.Workdir))
	}
	if len(spec.Packages) > 0 {
		pkgs := slices.Clone(spec.Packages)
		slices.Sort(pkgs)
		// One layer; the lists removed so the image keeps only the packages.
		fmt.Fprintf(&b, "RUN [\"/bin/sh\", \"-c\", %s]\n", jsonQuote("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "+
			strings.Join(pkgs, " ")+" && rm -rf /var/lib/apt/lists/*"))
	}
	for _, f := range spec.Files {
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		fmt.Fprintf(&b, "COPY [%s, %s]\n", jsonQuote("files/"+f.SHA256), jsonQuote(f.Dest))
		fmt.Fprintf(&b, "RUN [\"chmod\", %s, %s]\n", jsonQuote(strconv.FormatUint(uint64(mode), 8)), jsonQuote(f.Dest))
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		fmt.Fprintf(&b, "ENV %s=%s\n", k, jsonQuote(spec.Env[k]))
	}
	for _, c := range spec.Run {
		fmt.Fprintf(&b, "RUN [\"/bin/sh\", \"-c\", %s]\n", jsonQuote(c))
	}
	// sandboxd's last layer.
	b.WriteString("COPY --from=base /usr/local/bin/sandbox-driver /usr/local/bin/sandbox-iosidecar /usr/local/bin/\n")
	b.WriteString("COPY --from=base /usr/local/lib/sandboxd/ /usr/local/lib/sandboxd/\n")
	b.WriteString("COPY --from=base /etc/ld.so.preload /etc/ld.so.preload\n")
	b.WriteString("WORKDIR /workspace\nUSER 1000:1000\n")
	b.WriteString("ENTRYPOINT [\"/usr/local/bin/sandbox-driver\"]\nCMD [\"--io\", \"/io\", \"--workspace\", \"/workspace\"]\n")
	return b.String()
}

// jsonQuote quotes s as a JSON string, which the Dockerfile's exec form
// and ENV values read back exactly (no shell, no variable expansion in
// exec form).
func jsonQuote(s string) string {
	return strconv.Quote(s) // Go's quoting is JSON's for valid UTF-8 without control characters
}
