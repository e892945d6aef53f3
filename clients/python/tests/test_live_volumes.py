"""Live tests of volumes against a real sandboxd (see test_live_sandboxd.py
for how they are run), on its Docker backend."""

import os
import unittest
import uuid

import sandboxd

ADDR = os.environ.get("SANDBOXD_TEST_ADDR")


@unittest.skipUnless(ADDR, "SANDBOXD_TEST_ADDR is not set (run these through `go test ./clients/python`)")
class LiveVolumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = sandboxd.Client(ADDR, resume_timeout=120, call_timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def setUp(self):
        self.name = "py-" + uuid.uuid4().hex[:12]
        self.vol = self.client.create_volume(self.name, size_bytes=32 << 20)
        self.sandboxes = []

    def tearDown(self):
        for sb in self.sandboxes:
            try:
                sb.delete(missing_ok=True)
            except sandboxd.SandboxdError as e:
                print("tearDown: deleting %s: %s" % (sb.id, e))
        try:
            self.client.delete_volume(self.vol.id, force=True)
        except sandboxd.NotFound:
            pass

    def acquire(self, *mounts):
        sb = self.client.acquire("py-" + uuid.uuid4().hex[:12], volumes=list(mounts))
        self.sandboxes.append(sb)
        return sb

    def test_volume_lifecycle_and_files(self):
        self.assertTrue(self.vol.id.startswith("vol-"))
        self.assertEqual((self.vol.name, self.vol.size_bytes, self.vol.mounted_by), (self.name, 32 << 20, []))
        self.assertEqual(self.client.volume(self.name).id, self.vol.id)
        self.assertIn(self.vol.id, [v.id for v in self.client.volumes()])
        with self.assertRaises(sandboxd.AlreadyExists):
            self.client.create_volume(self.name)

        files = self.client.volume_files(self.name)
        data = os.urandom(3 << 20)
        info = files.upload("/in/data.bin", data)
        self.assertEqual((info.path, info.size), ("in/data.bin", len(data)))
        with self.assertRaises(sandboxd.AlreadyExists):
            files.upload("in/data.bin", b"x")
        self.assertEqual(files.download("in/data.bin"), data)
        files.mkdir("out/deep", parents=True)
        self.assertEqual([f.path for f in files.list("", depth=2)], ["in", "in/data.bin", "out", "out/deep"])
        self.assertTrue(files.stat("/out").is_dir)
        with self.assertRaises(sandboxd.FailedPrecondition):
            files.remove("out")
        files.remove("out", recursive=True)
        with self.assertRaises(sandboxd.NotFound):
            files.stat("out")
        with self.assertRaises(sandboxd.InvalidArgument):
            files.upload("../escape", b"x")

    def test_sandboxes_share_a_volume(self):
        files = self.client.volume_files(self.vol.id)
        files.upload("greeting.txt", "hello\n")
        writer = self.acquire((self.name, "/mnt/shared"))
        reader = self.acquire(sandboxd.VolumeMount(self.vol.id, "/data/shared", read_only=True))
        self.assertEqual(writer.info.volumes, [sandboxd.VolumeMount(self.vol.id, "/mnt/shared")])

        ex = writer.run_collect("cat /mnt/shared/greeting.txt && echo from-writer > /mnt/shared/note.txt", language="bash")
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "hello\n")
        # Seen by the other sandbox and by the volume calls at once.
        ex = reader.run_collect("cat /data/shared/note.txt", language="bash")
        self.assertTrue(ex.ok, ex)
        self.assertEqual(ex.stdout, "from-writer\n")
        self.assertEqual(files.download("note.txt"), b"from-writer\n")
        ex = reader.run_collect("echo no > /data/shared/ro.txt", language="bash")
        self.assertFalse(ex.ok, "a read-only mount was written")

        self.assertEqual(sorted(self.client.volume(self.vol.id).mounted_by), sorted([writer.id, reader.id]))
        with self.assertRaises(sandboxd.FailedPrecondition):
            self.client.delete_volume(self.vol.id)
        for sb in self.sandboxes:
            sb.delete()
        self.client.delete_volume(self.vol.id)
        with self.assertRaises(sandboxd.NotFound):
            self.client.volume(self.vol.id)


if __name__ == "__main__":
    unittest.main()
