package core

// runtimeGVisor is gVisor's Docker runtime name. sandboxd's Docker set-up
// registers it with --network=none, so a sandbox under it has no network
// whatever its spec says.
const RuntimeGVisor = "runsc"
