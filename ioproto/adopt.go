package ioproto

// KindAdopt is the record by which the host hands a warm-pool sandbox's
// running driver to a waking sandbox (PROTOCOL.md, *Adoption*): the host
// has stacked the waking sandbox's volumes over this container's /io and
// /workspace, and the driver starts over on them, keeping its default
// context's Python kernel (which has run nothing but the pool's warm-up).
// Like an interrupt record it has a command ID but is no command: it gets
// no events file, since anything the driver wrote about it would land in
// the new /io. It is appended to the log the driver had open, which the
// stacked /io then hides.
const KindAdopt = "adopt"

// EnvPoolDriver, set to "1" in a warm-pool container's environment, makes
// its driver honour an adopt record; every other driver ignores one.
const EnvPoolDriver = "SANDBOX_POOL_DRIVER"
