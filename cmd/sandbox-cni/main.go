// Command sandbox-cni is a chained CNI plugin (type "sandbox-cni", the
// binary's name, as the runtime finds a plugin by its type) for
// the nodes that run sandboxd's sandbox Pods on Kubernetes: when a Pod's
// network is set up, it confines the Pod's sandbox user to the io
// sidecar's egress gateway (orchestrator/backend/kube/podnet says how and
// why), so that networked sandboxes reach only what their policy allows.
// Pod Security forbids the NET_ADMIN the Pod would need to do it itself.
//
// It goes last in the node's chain, after the plugins that give the Pod its
// interface and address, and passes their result on unchanged:
//
//	{"type": "sandbox-cni", "namespaces": ["sandboxd"]}
//
// namespaces limits it to Pods of those Kubernetes namespaces (from the
// runtime's K8S_POD_NAMESPACE); empty: every Pod. uid, tcpPort, dnsPort and
// probePort override podnet's defaults, which the io sidecar's flags
// share. DEL has nothing to undo (the table goes with the namespace);
// CHECK fails when a listed Pod's namespace lacks the table.
package main

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/podnet"
)

// conf is the plugin's configuration in the chain.
type conf struct {
	types.PluginConf
	Namespaces []string `json:"namespaces,omitempty"`
	UID        uint32   `json:"uid,omitempty"`
	TCPPort    uint16   `json:"tcpPort,omitempty"`
	DNSPort    uint16   `json:"dnsPort,omitempty"`
	ProbePort  uint16   `json:"probePort,omitempty"`
}

// k8sArgs are the runtime's CNI_ARGS the plugin reads.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString // the runtime's name for it
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck},
		version.All, "sandbox-cni: confines sandboxd's sandbox Pods to their io sidecar's egress gateway")
}

// parse reads the configuration and the previous plugins' result, which a
// chained plugin must have.
func parse(stdin []byte) (*conf, error) {
	var c conf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("sandbox-cni: parse the configuration: %w", err)
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, fmt.Errorf("sandbox-cni: parse the previous result: %w", err)
	}
	return &c, nil
}

// applies says whether the Pod of args is one the configuration lists.
func (c *conf) applies(args *skel.CmdArgs) (bool, error) {
	if len(c.Namespaces) == 0 {
		return true, nil
	}
	var a k8sArgs
	a.IgnoreUnknown = true
	if err := types.LoadArgs(args.Args, &a); err != nil {
		return false, fmt.Errorf("sandbox-cni: parse CNI_ARGS: %w", err)
	}
	return slices.Contains(c.Namespaces, string(a.K8S_POD_NAMESPACE)), nil
}

func (c *conf) podnet() podnet.Config {
	return podnet.Config{UID: c.UID, TCPPort: c.TCPPort, DNSPort: c.DNSPort, ProbePort: c.ProbePort}
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	if c.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "sandbox-cni must be chained after the plugins that set up the Pod's network", "no prevResult")
	}
	ok, err := c.applies(args)
	if err != nil {
		return err
	}
	if ok {
		if err := podnet.Install(args.Netns, c.podnet()); err != nil {
			return err
		}
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

func cmdDel(*skel.CmdArgs) error { return nil }

func cmdCheck(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	ok, err := c.applies(args)
	if err != nil || !ok {
		return err
	}
	installed, err := podnet.Installed(args.Netns)
	if err != nil {
		return err
	}
	if !installed {
		return fmt.Errorf("sandbox-cni: the Pod's network namespace %s lacks table inet %s", args.Netns, podnet.TableName)
	}
	return nil
}
