package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Build a template with a tool copied from a local archive, then create a
// sandbox from it. (Not run: it needs a sandboxd with templates.)
func ExampleClient_BuildTemplate() {
	c, err := client.Dial("127.0.0.1:50051", client.WithToken(os.Getenv("SANDBOXD_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// tool.tar holds one top entry, "tool/".
	f, err := os.Open("tool.tar")
	if err != nil {
		log.Fatal(err)
	}
	key, err := c.UploadTemplateArchive(ctx, f)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	spec := &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{
		{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: []string{"jq"}}}},
		{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Archive: key, Src: "tool", Dest: "/opt/tool/", Owner: "sandbox"}}},
		{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: map[string]string{"TOOL_HOME": "/opt/tool"}}}},
		{Step: &sandboxv1.TemplateStep_Run{Run: "jq --version > /opt/tool/jq-version"}},
	}}
	_, v, err := c.BuildTemplate(ctx, "tools", spec, false, func(l *sandboxv1.TemplateBuildLine) {
		fmt.Println(l.GetLine())
	})
	if err != nil {
		// v, when set, is the failed version: its reason names the step.
		log.Fatal(err)
	}
	fmt.Println("version", v.GetVersion(), "ready")

	sb, err := c.Acquire(ctx, "alice", client.WithTemplate("tools"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sb.Sandbox.GetTemplate(), sb.Sandbox.GetTemplateVersion())
}
