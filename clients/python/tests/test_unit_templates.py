"""Unit tests (no server) of the template calls: uploads in chunks under
the content's SHA-256 (directories packed as reproducible tars), specs
from dicts with every kind of step, the build stream's lines and outcome,
failed builds raising their class with the finished version, a broken
stream followed again, and acquire's template."""

import datetime
import hashlib
import io
import os
import tarfile
import tempfile
import unittest

import grpc

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb

from test_unit_volumes import RpcError

TPL = "tpl-aaaaaaaaaaaaaaaaaaaa"


def version(n, state=pb.TEMPLATE_STATE_BUILDING, reason=""):
    v = pb.TemplateVersion(version=n, spec_hash="ab" * 32, state=state, reason=reason, size_bytes=1 << 20 if state == pb.TEMPLATE_STATE_READY else 0)
    v.started_at.FromDatetime(datetime.datetime(2026, 1, 2, 3, 4, 5))
    return v


def template():
    t = pb.Template(id=TPL, name="tools", tenant="acme", versions=[version(1, pb.TEMPLATE_STATE_READY), version(2)])
    t.created_at.FromDatetime(datetime.datetime(2026, 1, 2, 3, 4, 5))
    return t


class Stub:
    def __init__(self):
        self.requests = []
        self.archives = {}
        self.lines = ["Step 1/2", "Step 2/2"]
        self.done = version(2, pb.TEMPLATE_STATE_READY)
        self.error = None  # raised after done
        self.break_after = None  # lines before a broken BuildTemplate stream

    def UploadTemplateFile(self, requests, metadata=None, timeout=None):
        requests = iter(requests)
        header = next(requests).header
        self.requests.append(header)
        if header.key in self.archives:
            return pb.UploadTemplateFileResponse(existed=True)  # the rest is not read
        self.chunks = [m.chunk for m in requests]
        self.archives[header.key] = b"".join(self.chunks)
        return pb.UploadTemplateFileResponse()

    def _events(self, after, broken, wrap):
        for i, line in enumerate(self.lines, 1):
            if broken is not None and i > broken:
                raise RpcError(grpc.StatusCode.UNAVAILABLE, "connection reset")
            if i > after:
                msg = wrap()
                msg.line.seq, msg.line.line = i, line
                yield msg
        msg = wrap()
        msg.done.CopyFrom(self.done)
        yield msg
        if self.error is not None:
            raise self.error

    def BuildTemplate(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.name == "busy":
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "template busy: a build is running")
        yield pb.BuildTemplateResponse(started=pb.TemplateBuildStarted(template=template(), version=version(2)))
        broken, self.break_after = self.break_after, None
        yield from self._events(0, broken, pb.BuildTemplateResponse)

    def FollowTemplateBuild(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        yield from self._events(request.after_seq, None, pb.FollowTemplateBuildResponse)

    def GetTemplate(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.template not in ("tools", TPL):
            raise RpcError(grpc.StatusCode.NOT_FOUND, "template %r not found" % request.template)
        return pb.GetTemplateResponse(template=template())

    def ListTemplates(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.ListTemplatesResponse(templates=[template()])

    def DeleteTemplate(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.DeleteTemplateResponse()

    def AcquireSandbox(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.AcquireSandboxResponse(sandbox=pb.Sandbox(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa", user_id=request.user_id,
                                                            template=TPL, template_version=1), created=True)


class TemplateTest(unittest.TestCase):
    def setUp(self):
        self.client = sandboxd.Client("127.0.0.1:1", resume_timeout=5)  # never connects: the stub is faked
        self.addCleanup(self.client.close)
        self.stub = self.client._stub = Stub()
        self.dir = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(self.dir))
        tool = os.path.join(self.dir, "tool")
        os.makedirs(os.path.join(tool, "bin"))
        with open(os.path.join(tool, "bin", "run"), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(tool, "bin", "run"), 0o755)
        with open(os.path.join(tool, "README"), "w") as f:
            f.write("hi")
        os.symlink("bin/run", os.path.join(tool, "run"))

    def test_upload_bytes_and_file_objects(self):
        data = bytes(range(256)) * 10000  # 2.56 MB: three chunks
        key = self.client.upload_template_file(data)
        self.assertEqual(key, hashlib.sha256(data).hexdigest())
        self.assertEqual(self.stub.requests[-1], pb.UploadTemplateFileHeader(key=key))
        self.assertEqual([len(c) for c in self.stub.chunks], [1 << 20, 1 << 20, len(data) - (2 << 20)])
        self.assertEqual(self.stub.archives[key], data)
        # Again, from a file object: the same key, existed (not re-sent).
        self.assertEqual(self.client.upload_template_file(io.BytesIO(data)), key)
        path = os.path.join(self.dir, "a.tar")
        with open(path, "wb") as f:
            f.write(b"tar")
        self.assertEqual(self.client.upload_template_file(path), hashlib.sha256(b"tar").hexdigest())
        with self.assertRaises(TypeError):
            self.client.upload_template_file(io.StringIO("text"))

    def test_upload_directory_packs_reproducibly(self):
        tool = os.path.join(self.dir, "tool")
        key = self.client.upload_template_file(tool)
        with tarfile.open(fileobj=io.BytesIO(self.stub.archives[key])) as tar:
            entries = [(m.name, m.type, oct(m.mode), m.mtime, m.uid, m.linkname) for m in tar.getmembers()]
        self.assertEqual(entries, [
            ("tool", tarfile.DIRTYPE, oct(os.stat(tool).st_mode & 0o777), 0, 0, ""),
            ("tool/README", tarfile.REGTYPE, oct(os.stat(os.path.join(tool, "README")).st_mode & 0o777), 0, 0, ""),
            ("tool/bin", tarfile.DIRTYPE, oct(os.stat(os.path.join(tool, "bin")).st_mode & 0o777), 0, 0, ""),
            ("tool/bin/run", tarfile.REGTYPE, "0o755", 0, 0, ""),
            ("tool/run", tarfile.SYMTYPE, "0o777", 0, 0, "bin/run"),
        ])
        os.utime(os.path.join(tool, "README"), (1, 1))
        self.assertEqual(self.client.upload_template_file(tool + "/"), key)

    def test_build_with_every_step(self):
        lines = []
        build = self.client.build_template("tools", {
            "base": "",
            "steps": [
                {"apt": ["jq", "curl"]},
                {"copy": {"src": "tool", "dest": "/opt/tool/", "mode": 0o644, "owner": "sandbox"}},
                {"env": {"TOOL_HOME": "/opt/tool", "PORT": 8080}},
                {"workdir": "/opt/tool"},
                {"user": "sandbox"},
                {"run": "echo built > /opt/tool/stamp"},
                {"copy": {"archive": "cd" * 32, "src": ".", "dest": "/srv/", "mode": "0755"}},
                {"copy": {"src": os.path.join(self.dir, "tool", "README"), "dest": "/etc/readme"}},
            ],
        }, force=True, on_log=lines.append, base_dir=self.dir)
        key = hashlib.sha256(self.stub.archives[self.stub.requests[0].key]).hexdigest()
        req = self.stub.requests[2]
        self.assertEqual(req, pb.BuildTemplateRequest(name="tools", force=True, spec=pb.TemplateSpec(steps=[
            pb.TemplateStep(apt=pb.AptStep(packages=["jq", "curl"])),
            pb.TemplateStep(copy=pb.CopyStep(archive=key, src="tool", dest="/opt/tool/", mode=0o644, owner="sandbox")),
            pb.TemplateStep(env=pb.EnvStep(vars={"TOOL_HOME": "/opt/tool", "PORT": "8080"})),
            pb.TemplateStep(workdir="/opt/tool"),
            pb.TemplateStep(user="sandbox"),
            pb.TemplateStep(run="echo built > /opt/tool/stamp"),
            pb.TemplateStep(copy=pb.CopyStep(archive="cd" * 32, src=".", dest="/srv/", mode=0o755)),
            pb.TemplateStep(copy=pb.CopyStep(archive=self.stub.requests[1].key, src="README", dest="/etc/readme")),
        ])))
        self.assertEqual([(l.seq, l.line) for l in lines], [(1, "Step 1/2"), (2, "Step 2/2")])
        self.assertIsInstance(build, sandboxd.TemplateBuild)
        self.assertEqual((build.template.id, build.template.name, build.template.tenant), (TPL, "tools", "acme"))
        self.assertEqual((build.version.version, build.version.state, build.version.size_bytes), (2, "READY", 1 << 20))
        self.assertEqual([v.state for v in build.template.versions], ["READY", "READY"])
        self.assertEqual(build.template.current.version, 2)

    def test_build_from_proto(self):
        spec = pb.TemplateSpec(steps=[pb.TemplateStep(run="true")])
        self.client.build_template("tools", spec)
        self.assertEqual(self.stub.requests[-1].spec, spec)

    def test_bad_specs(self):
        for spec in ({"steps": [{"apt": ["jq"], "run": "x"}]}, {"steps": [{}]}, {"steps": [{"aptt": ["jq"]}]},
                     {"stepz": []}, {"steps": [{"copy": {"dest": "/a"}}]}, {"steps": [{"copy": {"src": "a", "mod": 1}}]}):
            with self.assertRaises(ValueError, msg=spec):
                self.client.build_template("tools", spec)
        with self.assertRaises(TypeError):
            self.client.build_template("tools", "steps: []")
        self.assertEqual(self.stub.requests, [])

    def test_failed_builds_raise_their_class(self):
        for code, cls in ((grpc.StatusCode.FAILED_PRECONDITION, sandboxd.FailedPrecondition),
                          (grpc.StatusCode.DEADLINE_EXCEEDED, sandboxd.DeadlineExceeded),
                          (grpc.StatusCode.UNAVAILABLE, sandboxd.Unavailable)):
            self.stub.requests = []
            self.stub.done = version(2, pb.TEMPLATE_STATE_FAILED, "step 1 (run): exit status 1")
            self.stub.error = RpcError(code, "template tools version 2: step 1 (run): exit status 1")
            with self.assertRaises(cls) as cm:
                self.client.build_template("tools", {"steps": [{"run": "false"}]})
            self.assertEqual(cm.exception.template_version.state, "FAILED")
            self.assertIn("step 1 (run)", cm.exception.template_version.reason)
            # An engine failure after done is the build's answer: not followed again.
            self.assertEqual(len(self.stub.requests), 1)
        with self.assertRaises(sandboxd.FailedPrecondition) as cm:
            self.client.build_template("busy", {"steps": [{"run": "true"}]})
        self.assertIsNone(cm.exception.template_version)

    def test_broken_stream_is_followed_again(self):
        self.stub.lines = ["a", "b", "c", "d"]
        self.stub.break_after = 2
        lines = []
        build = self.client.build_template("tools", {"steps": [{"run": "true"}]}, on_log=lambda l: lines.append(l.line))
        self.assertEqual(lines, ["a", "b", "c", "d"])
        self.assertEqual(build.version.state, "READY")
        self.assertEqual(self.stub.requests[-1], pb.FollowTemplateBuildRequest(template=TPL, version=2, after_seq=2))

    def test_get_list_delete_follow(self):
        t = self.client.template("tools")
        self.assertEqual((t.id, [v.version for v in t.versions], t.current.version, t.latest.state), (TPL, [1, 2], 1, "BUILDING"))
        self.assertEqual(t.created_at.year, 2026)
        with self.assertRaises(sandboxd.NotFound):
            self.client.template("nope")
        self.assertEqual([t.name for t in self.client.templates(tenant="acme")], ["tools"])
        self.assertEqual(self.stub.requests[-1], pb.ListTemplatesRequest(tenant="acme"))
        self.client.delete_template("tools")
        self.assertEqual(self.stub.requests[-1], pb.DeleteTemplateRequest(template="tools"))
        seqs = []
        v = self.client.follow_template_build("tools", version=2, after_seq=1, on_log=lambda l: seqs.append(l.seq))
        self.assertEqual((v.version, v.state, seqs), (2, "READY", [2]))
        self.assertEqual(self.stub.requests[-1], pb.FollowTemplateBuildRequest(template="tools", version=2, after_seq=1))

    def test_acquire_with_template(self):
        sb = self.client.acquire("alice", template="tools")
        self.assertEqual(self.stub.requests[-1].options.template, "tools")
        self.assertEqual((sb.info.template, sb.info.template_version), (TPL, 1))


if __name__ == "__main__":
    unittest.main()
