//go:build linux

package node

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PauseImage is the Pod sandbox image of every test node, built here
// (pauseArchive) and imported: there is no registry to pull one from.
const PauseImage = "sandboxd.test/pause:1"

// containerdConfig is node n's containerd configuration (version 2, as
// containerd 1.6 and 1.7 read it): its own root, state and sockets, so that
// it never touches Docker's containerd; the CRI plugin with the pause image
// above, runc under cgroupfs (the kubelet's driver here) as the default
// runtime and, when gVisor is here, runsc as runtime handler runscHandler
// (under runc's shim, as runsccri: gvisor.go), CNI from Debian's
// plugins with the node's own configuration, and
// network namespaces under the state directory (so that a lost node's are
// found and removed with it). OOM score adjustments are kept no lower than
// containerd's own: this machine's root lacks CAP_SYS_RESOURCE, and runc
// fails to start a Pod's sandbox that asks for -998 otherwise.
func containerdConfig(n *Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, n.containerdRoot, n.containerdState, n.criSocket, n.criSocket+".ttrpc", filepath.Join(n.dir, "opt"), PauseImage, filepath.Join(n.containerdState, "runc"))
	if n.runsccri != "" {
		fmt.Fprintf(&b, `    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[1]s.options]
        BinaryName = %[2]q
        SystemdCgroup = false
        Root = %[3]q
`, runscHandler, n.runsccri, filepath.Join(n.containerdState, "runsc"))
	}
	fmt.Fprintf(&b, `  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, n.cniBin, filepath.Join(n.dir, "cni"))
	return b.String()
}

// cniConfig is node n's Pod network: a bridge in the node's namespace with
// the node's Pod range, the bridge the Pods' default gateway, no
// masquerading (the host routes the range to the node, which forwards);
// then, with Options.EgressCNI, sandboxd's egress plugin, for every Pod.
func cniConfig(n *Node) string {
	plugins := []any{map[string]any{
		"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR.String()}}},
			"dataDir": filepath.Join(n.containerdState, "ipam"),
		},
	}}
	if n.egressCNI {
		plugins = append(plugins, map[string]any{"type": "sandbox-cni"})
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "sandboxd-test-" + n.Name,
		"plugins":    plugins,
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b)
}

// dialCRI connects to containerd's CRI socket.
func dialCRI(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// waitCRI waits until containerd's CRI answers (its plugins loaded).
func (n *Node) waitCRI(ctx context.Context) error {
	var last error
	for ctx.Err() == nil {
		if n.containerd.exited() {
			return fmt.Errorf("containerd exited: %v\n%s", n.containerd.err, n.containerd.tail())
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = n.CRI.Version(cctx, &runtimeapi.VersionRequest{})
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // polling a socket that is not there yet
	}
	return fmt.Errorf("containerd's CRI did not answer: %v\n%s", last, n.containerd.tail())
}

// importImage makes ref (a Docker image of this machine) available to the
// node's containerd as name, unpacked, unless it already is with the same
// ID (the node's image store is kept between test runs: importing the
// sandbox image takes half a minute). Unpacked here, not by the first
// container: Pods created at once would all wait for the unpacking, past
// the kubelet's CRI timeout on a loaded machine.
func (n *Node) importImage(ctx context.Context, ref, name string) error {
	out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", ref).Output()
	if err != nil {
		return fmt.Errorf("docker image inspect %s: %w", ref, err)
	}
	id := strings.TrimSpace(string(out))
	if st, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}}); err == nil && st.GetImage().GetId() == id {
		return nil
	}
	save := exec.CommandContext(ctx, "docker", "save", ref)
	imp := n.ctr(ctx, "images", "import", "-")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	var stderr bytes.Buffer
	save.Stderr, imp.Stderr = &stderr, &stderr
	if err := save.Start(); err != nil {
		return err
	}
	ierr := imp.Run()
	serr := save.Wait()
	if ierr != nil || serr != nil {
		return fmt.Errorf("docker save %s | ctr images import: %v, %v: %s", ref, serr, ierr, stderr.String())
	}
	imported := normalizeRef(ref)
	if imported != name {
		// ctr tags the archive's name; the node runs the image as name.
		_ = n.ctr(ctx, "images", "rm", name).Run()
		if out, err := n.ctr(ctx, "images", "tag", imported, name).CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images tag %s %s: %v: %s", imported, name, err, out)
		}
		_ = n.ctr(ctx, "images", "rm", imported).Run()
	}
	return nil
}

// importPause imports the pause image, built from pauseBin.
func (n *Node) importPause(ctx context.Context, pauseBin string) error {
	if st, err := n.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: PauseImage}}); err == nil && st.GetImage() != nil {
		return nil
	}
	archive, err := pauseArchive(pauseBin)
	if err != nil {
		return err
	}
	imp := n.ctr(ctx, "images", "import", "-")
	imp.Stdin = bytes.NewReader(archive)
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import (pause): %v: %s", err, out)
	}
	return nil
}

// ctr runs containerd's CLI against the node's containerd, in the CRI's
// namespace.
func (n *Node) ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", n.criSocket, "--namespace", "k8s.io"}, args...)...)
}

// normalizeRef is the name containerd gives a Docker image reference
// ("sandboxd-sandbox:x" → "docker.io/library/sandboxd-sandbox:x").
func normalizeRef(ref string) string {
	name := ref
	if !strings.Contains(strings.SplitN(name, "/", 2)[0], ".") && !strings.HasPrefix(name, "localhost/") {
		if !strings.Contains(name, "/") {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	if !strings.Contains(name[strings.LastIndex(name, "/")+1:], ":") {
		name += ":latest"
	}
	return name
}

// pauseArchive is a Docker image archive (docker save's format, which
// ctr imports) of one layer holding bin as /pause, its entrypoint.
func pauseArchive(bin string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := lw.Write(data); err != nil {
		return nil, err
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	diffID := sha256.Sum256(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{PauseImage}, "Layers": []string{"layer/layer.tar"}}})
	var out bytes.Buffer
	w := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{configName, config}, {"layer/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), w.Close()
}

// removeAllPods stops and removes every Pod sandbox of the node's
// containerd: those a killed test run left in the kept image store, or, at
// the end, this run's, so that their mounts and network namespaces go.
func (n *Node) removeAllPods(ctx context.Context) error {
	list, err := n.CRI.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, s := range list.GetItems() {
		if _, err := n.CRI.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			return fmt.Errorf("stop pod sandbox %s: %w", s.GetId(), err)
		}
		if _, err := n.CRI.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			return fmt.Errorf("remove pod sandbox %s: %w", s.GetId(), err)
		}
	}
	return nil
}
