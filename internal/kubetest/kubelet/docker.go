package kubelet

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"
	corev1 "k8s.io/api/core/v1"
)

// pauseConfig is the pause container of a Pod: it holds the Pod's network
// (and IPC) namespace on the default bridge and publishes every
// containerPort of the Pod on its IP. It runs the Pod's first image with
// `sleep infinity` under Docker's init, so no pause image is needed.
func (w *podWorker) pauseConfig(pod *corev1.Pod, ip netip.Addr) (*container.Config, *container.HostConfig) {
	exposed := nat.PortSet{}
	bindings := nat.PortMap{}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, p := range c.Ports {
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			port := nat.Port(fmt.Sprintf("%d/%s", p.ContainerPort, proto))
			exposed[port] = struct{}{}
			bindings[port] = []nat.PortBinding{{HostIP: ip.String(), HostPort: strconv.Itoa(int(p.ContainerPort))}}
		}
	}
	hostname := pod.Name
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	init := true
	cfg := &container.Config{
		Image:        pod.Spec.Containers[0].Image,
		Entrypoint:   []string{"sleep", "infinity"},
		Hostname:     hostname,
		ExposedPorts: exposed,
		Labels:       w.labels(rolePause, "POD"),
	}
	hc := &container.HostConfig{
		NetworkMode:    "bridge",
		IpcMode:        "shareable",
		PortBindings:   bindings,
		Init:           &init,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
	}
	return cfg, hc
}

// containerConfig is the Docker container of c: it joins the pause
// container's namespaces and gets the Pod's volumes, security context and
// resource limits.
func (w *podWorker) containerConfig(pod *corev1.Pod, c *ctr, env []string, vals map[string]string) (*container.Config, *container.HostConfig, error) {
	spec := c.spec
	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: expandAll(spec.Command, vals),
		Cmd:        expandAll(spec.Args, vals),
		Env:        env,
		WorkingDir: spec.WorkingDir,
		Tty:        spec.TTY,
		OpenStdin:  spec.Stdin,
		StdinOnce:  spec.StdinOnce,
		Labels:     w.labels(c.role, spec.Name),
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode("container:" + w.pauseID),
		IpcMode:     container.IpcMode("container:" + w.pauseID),
		Runtime:     w.runtime,
		Tmpfs:       map[string]string{},
	}

	// The security context: the Pod's, overridden field by field by the
	// container's.
	var uid, gid *int64
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
		if psc.FSGroup != nil {
			hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(*psc.FSGroup, 10))
		}
		for _, g := range psc.SupplementalGroups {
			hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			hc.ReadonlyRootfs = true
		}
		if sc.Privileged != nil && *sc.Privileged {
			hc.Privileged = true
		}
		if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
		}
		if caps := sc.Capabilities; caps != nil {
			for _, cp := range caps.Drop {
				hc.CapDrop = append(hc.CapDrop, string(cp))
			}
			for _, cp := range caps.Add {
				hc.CapAdd = append(hc.CapAdd, string(cp))
			}
		}
	}
	if nonRoot != nil && *nonRoot && uid != nil && *uid == 0 {
		return nil, nil, fmt.Errorf("container has runAsNonRoot and runAsUser 0")
	}
	switch {
	case uid != nil && gid != nil:
		cfg.User = fmt.Sprintf("%d:%d", *uid, *gid)
	case uid != nil:
		cfg.User = strconv.FormatInt(*uid, 10)
	}

	if q, ok := spec.Resources.Limits[corev1.ResourceMemory]; ok {
		hc.Memory = q.Value()
		hc.MemorySwap = q.Value()
	}
	if q, ok := spec.Resources.Limits[corev1.ResourceCPU]; ok {
		// Docker refuses more CPUs than its machine has.
		hc.NanoCPUs = min(q.MilliValue()*1_000_000, int64(w.k.ncpu)*1_000_000_000)
	}

	for _, m := range spec.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == m.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, nil, fmt.Errorf("volumeMount %s: no such volume", m.Name)
		}
		if ed := vol.EmptyDir; ed != nil && ed.Medium == corev1.StorageMediumMemory {
			// Docker mounts tmpfs noexec by default; Kubernetes does not.
			opts := "rw,exec,mode=0777"
			if ed.SizeLimit != nil && !ed.SizeLimit.IsZero() {
				opts += ",size=" + strconv.FormatInt(ed.SizeLimit.Value(), 10)
			}
			hc.Tmpfs[m.MountPath] = opts
			continue
		}
		src := filepath.Join(w.podDir(), vol.Name)
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
			if err := os.MkdirAll(src, 0o777); err != nil {
				return nil, nil, fmt.Errorf("volumeMount %s subPath: %w", m.Name, err)
			}
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return cfg, hc, nil
}

// pull pulls an image, for a Pod whose image is not on the machine.
func (k *Kubelet) pull(ctx context.Context, ref string) error {
	rc, err := k.docker.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}
