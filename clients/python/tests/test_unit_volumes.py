"""Unit tests (no server) of the volume calls: the requests sent, the
answers' conversion, uploads in chunks and downloads reassembled, errors
mapped to their classes, and acquire's volume mounts."""

import datetime
import unittest

import grpc

import sandboxd
from sandboxd._gen.sandbox.v1 import sandbox_pb2 as pb

VOL = "vol-aaaaaaaaaaaaaaaaaaaa"


class RpcError(grpc.RpcError, grpc.Call):
    """A failed call as grpc raises it."""

    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return ()

    def initial_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False


def volume(name="data"):
    v = pb.Volume(id=VOL, name=name, tenant="acme", size_bytes=1 << 30, used_bytes=4096, mounted_by=["sb-aaaaaaaaaaaaaaaaaaaa"])
    v.created_at.FromDatetime(datetime.datetime(2026, 1, 2, 3, 4, 5))
    return v


class Stub:
    def __init__(self):
        self.requests = []
        self.files = {}

    def CreateVolume(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.name == "taken":
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS, "volume taken exists")
        return pb.CreateVolumeResponse(volume=volume(request.name))

    def GetVolume(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.volume not in ("data", VOL):
            raise RpcError(grpc.StatusCode.NOT_FOUND, "volume %s not found" % request.volume)
        return pb.GetVolumeResponse(volume=volume())

    def ListVolumes(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.ListVolumesResponse(volumes=[volume(), volume("other")])

    def DeleteVolume(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if not request.force:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "volume data is mounted by sandbox sb-aaaaaaaaaaaaaaaaaaaa")
        return pb.DeleteVolumeResponse()

    def UploadVolumeFile(self, requests, metadata=None, timeout=None):
        msgs = list(requests)
        header = msgs[0].header
        self.requests.append(header)
        self.chunks = [m.chunk for m in msgs[1:]]
        if header.path in self.files and not header.overwrite:
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS, "/%s exists" % header.path)
        data = b"".join(self.chunks)
        self.files[header.path] = data
        return pb.UploadVolumeFileResponse(file=pb.FileInfo(path=header.path.lstrip("/"), size=len(data), type=pb.FILE_TYPE_FILE))

    def DownloadVolumeFile(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.path not in self.files:
            raise RpcError(grpc.StatusCode.NOT_FOUND, "/%s not found" % request.path)
        data = self.files[request.path]
        first = True
        for i in range(0, max(len(data), 1), 1 << 20):
            msg = pb.DownloadVolumeFileResponse(chunk=data[i:i + (1 << 20)])
            if first:
                msg.file.CopyFrom(pb.FileInfo(path=request.path, size=len(data)))
                first = False
            yield msg

    def ListVolumeFiles(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        # A name a sandbox wrote in invalid UTF-8 arrives with U+FFFD.
        return pb.ListVolumeFilesResponse(files=[pb.FileInfo(path="a", is_dir=True, type=pb.FILE_TYPE_DIRECTORY),
                                                 pb.FileInfo(path="a/\ufffd", size=3, type=pb.FILE_TYPE_FILE)])

    def StatVolumeFile(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.StatVolumeFileResponse(file=pb.FileInfo(path="", is_dir=True, type=pb.FILE_TYPE_DIRECTORY))

    def MakeVolumeDirectory(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.MakeVolumeDirectoryResponse(file=pb.FileInfo(path=request.path, is_dir=True, type=pb.FILE_TYPE_DIRECTORY))

    def RemoveVolumeFile(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        if request.path.strip("/") == "":
            raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, "remove /: the volume's root cannot be removed")
        return pb.RemoveVolumeFileResponse()

    def SetVolumeFileAttributes(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        return pb.SetVolumeFileAttributesResponse(file=pb.FileInfo(path=request.path.strip("/"), mode=request.mode, type=pb.FILE_TYPE_FILE))

    def AcquireSandbox(self, request, metadata=None, timeout=None):
        self.requests.append(request)
        mounts = [pb.VolumeMount(volume=VOL, mount_path=m.mount_path, read_only=m.read_only) for m in request.options.volumes]
        return pb.AcquireSandboxResponse(sandbox=pb.Sandbox(sandbox_id="sb-aaaaaaaaaaaaaaaaaaaa", user_id=request.user_id, volumes=mounts),
                                         created=True)


class VolumeTest(unittest.TestCase):
    def setUp(self):
        self.client = sandboxd.Client("127.0.0.1:1")  # never connects: the stub is faked
        self.addCleanup(self.client.close)
        self.stub = self.client._stub = Stub()

    def test_lifecycle(self):
        v = self.client.create_volume("data", size_bytes=64 << 20)
        self.assertEqual(self.stub.requests[-1], pb.CreateVolumeRequest(name="data", size_bytes=64 << 20))
        self.assertIsInstance(v, sandboxd.VolumeInfo)
        self.assertEqual((v.id, v.name, v.tenant, v.size_bytes, v.used_bytes), (VOL, "data", "acme", 1 << 30, 4096))
        self.assertEqual(v.mounted_by, ["sb-aaaaaaaaaaaaaaaaaaaa"])
        self.assertEqual(v.created_at.year, 2026)
        with self.assertRaises(sandboxd.AlreadyExists):
            self.client.create_volume("taken")
        self.assertEqual(self.client.volume("data").id, VOL)
        with self.assertRaises(sandboxd.NotFound):
            self.client.volume("nope")
        self.assertEqual([v.name for v in self.client.volumes(tenant="acme")], ["data", "other"])
        self.assertEqual(self.stub.requests[-1], pb.ListVolumesRequest(tenant="acme"))
        with self.assertRaises(sandboxd.FailedPrecondition) as cm:
            self.client.delete_volume("data")
        self.assertIn("mounted by", cm.exception.message)
        self.client.delete_volume("data", force=True)
        self.assertEqual(self.stub.requests[-1], pb.DeleteVolumeRequest(volume="data", force=True))

    def test_files_round_trip(self):
        files = self.client.volume_files("data")
        data = bytes(range(256)) * 10000  # 2.56 MB: three chunks
        info = files.upload("/in/data.bin", data)
        self.assertEqual((info.path, info.size), ("in/data.bin", len(data)))
        self.assertEqual(self.stub.requests[-1], pb.UploadVolumeFileHeader(volume="data", path="/in/data.bin"))
        self.assertEqual([len(c) for c in self.stub.chunks], [1 << 20, 1 << 20, len(data) - (2 << 20)])
        with self.assertRaises(sandboxd.AlreadyExists):
            files.upload("/in/data.bin", "x")
        files.upload("/in/data.bin", "héllo", overwrite=True)
        self.assertEqual(files.download("/in/data.bin"), "héllo".encode("utf-8"))
        files.upload("empty", b"")
        self.assertEqual(files.download("empty"), b"")
        with self.assertRaises(sandboxd.NotFound):
            files.download("missing")

    def test_file_calls(self):
        files = self.client.volume_files(VOL)
        listed = files.list("/a", depth=2)
        self.assertEqual(self.stub.requests[-1], pb.ListVolumeFilesRequest(volume=VOL, path="/a", depth=2))
        self.assertEqual([f.path for f in listed], ["a", "a/\ufffd"])
        root = files.stat()
        self.assertEqual(root.path, "")
        self.assertEqual(self.stub.requests[-1], pb.StatVolumeFileRequest(volume=VOL))
        files.mkdir("x/y", parents=True)
        self.assertEqual(self.stub.requests[-1], pb.MakeVolumeDirectoryRequest(volume=VOL, path="x/y", parents=True))
        files.remove("x", recursive=True)
        self.assertEqual(self.stub.requests[-1], pb.RemoveVolumeFileRequest(volume=VOL, path="x", recursive=True))
        with self.assertRaises(sandboxd.InvalidArgument):
            files.remove("/")
        info = files.set_attributes("/f", mode=0o640)
        req = self.stub.requests[-1]
        self.assertEqual((req.volume, req.path, req.mode, req.HasField("uid"), req.HasField("gid")), (VOL, "/f", 0o640, False, False))
        self.assertEqual((info.path, info.mode), ("f", 0o640))

    def test_acquire_with_volumes(self):
        sb = self.client.acquire("alice", volumes=[sandboxd.VolumeMount("data", "/mnt/data"), ("ref", "/data/ref", True)])
        req = self.stub.requests[-1]
        self.assertEqual(list(req.options.volumes), [pb.VolumeMount(volume="data", mount_path="/mnt/data"),
                                                     pb.VolumeMount(volume="ref", mount_path="/data/ref", read_only=True)])
        self.assertEqual(sb.info.volumes, [sandboxd.VolumeMount(VOL, "/mnt/data"), sandboxd.VolumeMount(VOL, "/data/ref", True)])
        with self.assertRaises(TypeError):
            self.client.acquire("alice", volumes=["data:/mnt/data"])


if __name__ == "__main__":
    unittest.main()
