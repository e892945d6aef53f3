// Command pause is the test nodes' Pod sandbox image's one program (the
// kubelet's "pause" container): it holds the Pod's namespaces, reaps
// orphans, and exits on SIGTERM or SIGINT. There is no registry to pull
// the usual one from; internal/kubetest/node builds this into an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
