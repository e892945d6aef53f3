// Shared set-up of the SDK suites: the official E2B SDKs, unmodified, from
// the npm cache the Makefile's e2b-sdk-tools fills (E2B_SDK_DIR), pointed
// at a sandboxd started by e2bapi's Go test (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY).
import { createRequire } from 'node:module'
import path from 'node:path'

const dir = process.env.E2B_SDK_DIR
if (!dir) throw new Error('E2B_SDK_DIR is not set (run through go test ./orchestrator/door/e2bapi)')
const require = createRequire(path.join(dir, 'node_modules') + '/')

/** @e2b/code-interpreter: Sandbox with runCode and contexts. */
export const ci = require('@e2b/code-interpreter')
/** e2b: the core SDK (commands, files, errors). */
export const core = require('e2b')
export const { Sandbox } = ci

/** Test timeout for a scenario, in ms (sandboxes start in a second or two; CI machines are slow). */
export const T = { timeout: 120_000 }

/**
 * The backend of the sandboxd under test, as the Go test that started it
 * says (SANDBOXD_E2B_BACKEND): 'docker' unless it says 'kubernetes'.
 */
export const backend = process.env.SANDBOXD_E2B_BACKEND || 'docker'
export const onKube = backend === 'kubernetes'

/**
 * Whether the sandboxd under test can read its sandboxes' metrics: always
 * on docker; on kubernetes when its nodes' kubelets serve their Summary API
 * (real nodes: SANDBOXD_E2B_KUBE_METRICS=1; the test kubelet serves none).
 */
const hasMetrics = !onKube || process.env.SANDBOXD_E2B_KUBE_METRICS === '1'

/**
 * Whether the sandboxd under test hibernates (pause, autoPause): always on
 * docker; on kubernetes with --kube-storage-class (the real nodes' local
 * volumes: SANDBOXD_E2B_KUBE_HIBERNATION=1).
 */
const hasHibernation = !onKube || process.env.SANDBOXD_E2B_KUBE_HIBERNATION === '1'

/** On the kubernetes backend without a storage class: pause is refused. */
export const kubeWithoutHibernation = onKube && !hasHibernation

/**
 * T for a scenario that needs feature, or on the kubernetes backend, which
 * lacks it (network, snapshots, volumes, templates: the door answers 501
 * naming it; hibernation without a storage class; per-sandbox metrics
 * where its kubelets serve no Summary API), T with a skip saying so.
 */
export function needs(feature) {
  if (feature === 'per-sandbox metrics' && hasMetrics) return T
  if (feature === 'hibernation' && hasHibernation) return T
  return onKube ? { ...T, skip: `sandboxd's kubernetes backend lacks ${feature}` } : T
}

/**
 * Runs fn with a new sandbox (code-interpreter template) and kills it
 * afterwards, whatever happened.
 */
export async function withSandbox(fn, opts = {}) {
  const sbx = await Sandbox.create(opts)
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

/**
 * Polls cond every 100 ms until it is true, failing with what (a string,
 * or a function giving one when the wait fails) after ms: a bounded wait
 * for something asynchronous, not a sleep.
 */
export async function waitFor(cond, what, ms = 20_000) {
  const end = Date.now() + ms
  for (;;) {
    if (await cond()) return
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** A promise with its resolve function, for events. */
export function deferred() {
  let resolve
  const p = new Promise((r) => { resolve = r })
  return { p, resolve }
}

/** Rejects after ms with a message naming what did not happen. */
export function within(p, ms, what) {
  let t
  return Promise.race([
    p,
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what} did not happen within ${ms} ms`)), ms) }),
  ]).finally(() => clearTimeout(t))
}
