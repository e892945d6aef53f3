"""Unit tests (no server) of the network calls: what the requests carry,
and the conversion of the answers into dataclasses."""

import datetime
import unittest

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb


class RecordingStub:
    """Answers each unary call with a scripted response, recording the
    request."""

    def __init__(self, **responses):
        self.responses = responses
        self.requests = []

    def __getattr__(self, name):
        def call(request, metadata=None, timeout=None):
            self.requests.append((name, request))
            return self.responses[name](request)

        return call


def sandbox_with(policy):
    return pb.Sandbox(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa", user_id="alice", network=True, network_policy=policy)


class NetworkTest(unittest.TestCase):
    def setUp(self):
        self.client = sandboxd.Client("127.0.0.1:1")  # never connects: the stub is faked
        self.addCleanup(self.client.close)

    def redacted(self, policy):
        out = pb.NetworkPolicy()
        out.CopyFrom(policy)
        for rule in out.rules.values():
            for name in list(rule.headers):
                rule.headers[name] = ""
        return out

    def test_acquire_with_a_policy(self):
        stub = RecordingStub(AcquireSandbox=lambda req: pb.AcquireSandboxResponse(
            sandbox=sandbox_with(self.redacted(req.options.network_policy)), created=True))
        self.client._stub = stub
        policy = sandboxd.NetworkPolicy(allow_out=["pypi.org"], deny_out=["0.0.0.0/0"],
                                        rules={"api.example.com": {"Authorization": "Bearer k"}})
        sb = self.client.acquire("alice", network_policy=policy)
        sent = stub.requests[0][1].options.network_policy
        self.assertEqual(list(sent.allow_out), ["pypi.org"])
        self.assertEqual(list(sent.deny_out), ["0.0.0.0/0"])
        self.assertEqual(dict(sent.rules["api.example.com"].headers), {"Authorization": "Bearer k"})
        self.assertEqual(sb.info.network_policy.rules, {"api.example.com": {"Authorization": ""}})
        self.assertTrue(sb.info.network)

        # A dict of the same fields does too; without a policy none is sent.
        self.client.acquire("bob", network_policy={"allow_out": ["a.com"], "allow_public_traffic": True})
        sent = stub.requests[1][1].options
        self.assertTrue(sent.HasField("network_policy"))
        self.assertTrue(sent.network_policy.allow_public_traffic)
        self.client.acquire("carol", network=True)
        self.assertFalse(stub.requests[2][1].options.HasField("network_policy"))
        self.assertTrue(stub.requests[2][1].options.network)
        with self.assertRaises(ValueError):
            self.client.acquire("dave", network_policy={"allowOut": ["a.com"]})

    def test_update_status_and_host(self):
        t = datetime.datetime(2026, 11, 21, 7, 30, tzinfo=datetime.timezone.utc)
        status = pb.GetNetworkStatusResponse(
            policy=pb.NetworkPolicy(allow_out=["pypi.org"]),
            counters=pb.NetworkCounters(bytes_out=1, bytes_in=2, connections_allowed=3, connections_denied=4, dns_allowed=5,
                                        dns_denied=6, connections_open=7, rule_requests=8, denials_dropped=9,
                                        dns_rate_limited=10, connections_refused_at_cap=11),
            denials=[pb.NetworkDenial(kind=pb.NETWORK_DENIAL_KIND_DNS, name="evil.example", reason="denied by deny_out 0.0.0.0/0"),
                     pb.NetworkDenial(kind=pb.NETWORK_DENIAL_KIND_TCP, address="198.51.100.7:443", reason="r")])
        status.denials[0].time.FromDatetime(t.replace(tzinfo=None))
        stub = RecordingStub(
            AcquireSandbox=lambda req: pb.AcquireSandboxResponse(sandbox=pb.Sandbox(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa")),
            UpdateNetworkPolicy=lambda req: pb.UpdateNetworkPolicyResponse(sandbox=sandbox_with(self.redacted(req.policy))),
            GetNetworkStatus=lambda req: status,
            GetHost=lambda req: pb.GetHostResponse(url="https://%d-%s.example.test/" % (req.port, req.sandbox_id),
                                                   token_required=True, traffic_token="tok", token_header="sandboxd-traffic-token"))
        self.client._stub = stub
        sb = self.client.acquire("alice")

        info = sb.update_network_policy(sandboxd.NetworkPolicy())
        name, req = stub.requests[-1]
        self.assertEqual(name, "UpdateNetworkPolicy")
        self.assertTrue(req.HasField("policy"), "an empty policy must still be sent")
        self.assertEqual(info.network_policy, sandboxd.NetworkPolicy())
        info = sb.update_network_policy({"rules": {"api.example.com": {"X-Key": "secret"}}})
        self.assertEqual(dict(stub.requests[-1][1].policy.rules["api.example.com"].headers), {"X-Key": "secret"})
        self.assertEqual(info.network_policy.rules, {"api.example.com": {"X-Key": ""}})
        self.assertIs(sb.info, info)

        st = sb.network_status()
        self.assertEqual(st.policy.allow_out, ["pypi.org"])
        self.assertEqual(st.counters, sandboxd.NetworkCounters(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11))
        self.assertEqual(st.denials[0], sandboxd.NetworkDenial(time=t, kind="DNS", name="evil.example", address="",
                                                               reason="denied by deny_out 0.0.0.0/0"))
        self.assertEqual((st.denials[1].kind, st.denials[1].address, st.denials[1].time), ("TCP", "198.51.100.7:443", None))

        h = sb.get_host(8080)
        self.assertEqual(h, sandboxd.HostInfo("https://8080-sb-aaaaaaaaaaaaaaaaaaaa.example.test/", True, "tok", "sandboxd-traffic-token"))
        calls = len(stub.requests)
        for port in (0, 65536):
            with self.assertRaises(ValueError):
                sb.get_host(port)
        self.assertEqual(len(stub.requests), calls)


if __name__ == "__main__":
    unittest.main()


class MetricsTest(unittest.TestCase):
    def test_metrics(self):
        t = datetime.datetime(2026, 11, 26, 17, 0, tzinfo=datetime.timezone.utc)
        sample = pb.SandboxMetricsSample(cpu_used_cores=0.5, cpu_limit_cores=2, memory_used_bytes=10, memory_cache_bytes=3,
                                         memory_limit_bytes=512 << 20, workspace=pb.DiskUsage(used_bytes=1, limit_bytes=2),
                                         io=pb.DiskUsage(used_bytes=3, limit_bytes=4), pids=5, pids_limit=256)
        sample.time.FromDatetime(t.replace(tzinfo=None))
        sealed = pb.SandboxMetricsSample()
        sealed.CopyFrom(sample)
        sample.network.CopyFrom(pb.NetworkBytes(bytes_in=7, bytes_out=8))
        stub = RecordingStub(
            AcquireSandbox=lambda req: pb.AcquireSandboxResponse(sandbox=pb.Sandbox(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa")),
            GetSandboxMetrics=lambda req: pb.GetSandboxMetricsResponse(samples=[sealed, sample]))
        client = sandboxd.Client("127.0.0.1:1")
        self.addCleanup(client.close)
        client._stub = stub
        sb = client.acquire("alice")
        got = sb.metrics()
        self.assertFalse(stub.requests[-1][1].HasField("since"))
        self.assertEqual(got[1], sandboxd.MetricsSample(t, 0.5, 2, 10, 3, 512 << 20, (1, 2), (3, 4), 5, 256, (7, 8)))
        self.assertIsNone(got[0].network)
        self.assertEqual(got[1].cpu_used_percent, 25)
        sb.metrics(since=t)
        self.assertEqual(stub.requests[-1][1].since.ToDatetime(tzinfo=datetime.timezone.utc), t)
