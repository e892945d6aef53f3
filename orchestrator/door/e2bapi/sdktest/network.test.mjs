// The E2B door's network options through the official SDK: what create
// and updateNetwork send and what getInfo returns. Enforcement (the egress
// gateway) is tested elsewhere; here the API's answers are asserted, and
// that no header value a rule carries ever comes back; and getHost's URLs
// through sandboxd's ports front. The Go side starts sandboxd with
// --allow-network and the ports front (SANDBOXD_PORTS_ADDR); on the
// kubernetes backend with --kube-egress-cni too, where the same scenarios
// run: rules included (their values sealed on the sandbox's Pod).
import { test, describe } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox, core, T, withSandbox, waitFor, onKube } from './helpers.mjs'

const { SandboxError } = core
const N = T

const SECRET = 'Bearer sk-sdk-network-secret-0123456789'

describe('network', () => {
  test('create with network: getInfo returns the policy, header names without values', N, async () => {
    const rules = { 'API.example.com': [{ transform: { headers: { Authorization: SECRET } } }] }
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, true)
      // allowOut as given (matched without regard to case); rule keys in
      // lower case, as E2B stores them.
      assert.deepEqual(info.network.allowOut, ['API.example.com', 'pypi.org'])
      assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
      assert.deepEqual(info.network.rules, { 'api.example.com': [{ transform: { headers: { Authorization: '' } } }] })
      assert.equal(info.network.allowPublicTraffic, false)
      assert.ok(!JSON.stringify(info).includes('sk-sdk'), 'getInfo shows the secret')
      const listed = await Sandbox.list().nextItems()
      assert.ok(!JSON.stringify(listed).includes('sk-sdk'), 'list shows the secret')
      // The sandbox runs code as any other.
      assert.equal((await sbx.runCode('6 * 7')).text, '42')
    }, {
      network: {
        allowOut: ({ rules }) => [...rules.keys(), 'pypi.org'],
        denyOut: ({ allTraffic }) => [allTraffic],
        rules,
        allowPublicTraffic: false,
      },
    })
  })

  test('updateNetwork replaces the egress rules whole; allowInternetAccess false denies all traffic', N, async () => {
    await withSandbox(async (sbx) => {
      const rules = { '*.example.com': [{ transform: { headers: { 'X-Api-Key': SECRET } } }, { transform: { headers: { 'X-Org': 'o' } } }] }
      await sbx.updateNetwork({
        allowOut: ['files.pythonhosted.org'],
        rules,
        allowInternetAccess: false,
      })
      let info = await sbx.getInfo()
      assert.deepEqual(info.network.allowOut, ['files.pythonhosted.org'])
      assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
      assert.deepEqual(info.network.rules, { '*.example.com': [{ transform: { headers: { 'X-Api-Key': '', 'X-Org': '' } } }] })
      assert.equal(info.network.allowPublicTraffic, true, 'the update keeps allowPublicTraffic')
      assert.ok(!JSON.stringify(info).includes('sk-sdk'))

      await Sandbox.updateNetwork(sbx.sandboxId, {}) // omitting a field clears it
      info = await sbx.getInfo()
      assert.equal(info.network.allowOut, undefined)
      assert.equal(info.network.denyOut, undefined)
      assert.equal(info.network.rules, undefined)
      assert.equal(info.allowInternetAccess, true)
    }, { network: { allowOut: ['pypi.org'], allowPublicTraffic: true } })
  })

  test('allowInternetAccess alone gives network under the server default; without it the sandbox is sealed', N, async () => {
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, true)
      assert.deepEqual(info.network, { allowOut: undefined, denyOut: undefined, rules: undefined, egressProxy: undefined,
        allowPublicTraffic: false, maskRequestHost: undefined, httpsPorts: undefined })
    }, { allowInternetAccess: true })
    await withSandbox(async (sbx) => {
      const info = await sbx.getInfo()
      assert.equal(info.allowInternetAccess, false)
      assert.equal(info.network, undefined)
      await assert.rejects(sbx.updateNetwork({ allowOut: ['pypi.org'] }),
        (e) => e instanceof SandboxError && e.statusCode === 409 && /has no network/.test(e.message))
    })
  })

  test('refusals name what is wrong: a bad entry, an option sandboxd does not offer', N, async () => {
    await assert.rejects(Sandbox.create({ network: { allowOut: ['ok.example.com', 'not_a_domain.com'] } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /"not_a_domain.com"/.test(e.message))
    await assert.rejects(Sandbox.create({ network: { egressProxy: { address: 'proxy.example.com:1080' } } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /egressProxy is not supported/.test(e.message))
    await assert.rejects(Sandbox.create({ network: { rules: { 'api.example.com': [{ transform: { headers: { Host: 'evil.example' } } }] } } }),
      (e) => e instanceof SandboxError && e.statusCode === 400 && /"Host"/.test(e.message))
  })

  test('getHost: a web server in the sandbox through the ports front, with the traffic token unless public', N, async () => {
    const front = process.env.SANDBOXD_PORTS_ADDR
    const door = new URL(process.env.E2B_API_URL).host
    assert.ok(front, 'SANDBOXD_PORTS_ADDR is not set')
    const serve = (sbx) => sbx.commands.run(
      'mkdir -p www && echo "hello from $(hostname)" > www/hi.txt && exec python3 -m http.server 8080 --directory www', { background: true })
    await withSandbox(async (priv) => {
      await withSandbox(async (pub) => {
        await serve(priv)
        await serve(pub)
        const host = priv.getHost(8080)
        assert.equal(host, `8080-${priv.sandboxId}.sandboxes.test`, 'getHost names the front\'s domain')
        assert.ok(priv.trafficAccessToken, 'create answers a traffic token')
        const tok = { 'e2b-traffic-access-token': priv.trafficAccessToken }
        let last
        await waitFor(async () => (last = await get(front, host, '/hi.txt', tok)).status === 200,
          () => `the private sandbox's server through the front (last: ${JSON.stringify(last)})`)
        assert.match(last.body, /^hello from /)

        // Private: no token, or another sandbox's, is the same 401.
        assert.equal((await get(front, host, '/hi.txt')).status, 401, 'no token')
        assert.equal((await get(front, host, '/hi.txt', { 'e2b-traffic-access-token': pub.trafficAccessToken })).status, 401, 'another sandbox\'s token')
        // The E2B door passes getHost's Host to the front.
        const viaDoor = await get(door, host, '/hi.txt', tok)
        assert.equal(viaDoor.status, 200, `through the E2B door: ${JSON.stringify(viaDoor)}`)
        assert.equal(viaDoor.body, last.body)
        assert.equal((await get(door, host, '/hi.txt')).status, 401, 'no token through the E2B door')

        // Public: no token needed.
        const pubHost = pub.getHost(8080)
        await waitFor(async () => (last = await get(front, pubHost, '/hi.txt')).status === 200,
          () => `the public sandbox's server without a token (last: ${JSON.stringify(last)})`)
        assert.notEqual(last.body, viaDoor.body, 'each URL reaches its own sandbox')
      }, { network: { allowPublicTraffic: true } })
    }, { network: { allowPublicTraffic: false } })
  })
})

/**
 * GETs path from addr (host:port) with the Host header host (getHost's
 * names need no resolver this way), within 10 s.
 */
function get(addr, host, path, headers = {}) {
  const u = new URL(`http://${addr}`)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, headers: { ...headers, Host: host } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { if (body.length < 1 << 16) body += c })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.setTimeout(10_000, () => req.destroy(new Error(`GET ${host}${path} via ${addr}: no answer within 10 s`)))
    req.end()
  })
}
