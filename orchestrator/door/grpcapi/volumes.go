package grpcapi

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The volume calls. Like the snapshot calls they check only the request's
// shape (the volume reference present, a path where one is needed); the
// domain checks references, names, sizes and paths (core.Validating), and
// that a volume is the caller's tenant's.

// CreateVolume implements sandboxv1.SandboxServiceServer.
func (s *Service) CreateVolume(ctx context.Context, req *sandboxv1.CreateVolumeRequest) (*sandboxv1.CreateVolumeResponse, error) {
	if err := required("name", req.GetName()); err != nil {
		return nil, err
	}
	if req.GetSizeBytes() < 0 {
		return nil, invalid("size_bytes %d is negative; give 0 for the default", req.GetSizeBytes())
	}
	v, err := s.m.CreateVolume(ctx, req.GetName(), req.GetSizeBytes())
	if err != nil {
		return nil, s.fail(ctx, "CreateVolume", err)
	}
	return &sandboxv1.CreateVolumeResponse{Volume: volumeToProto(v)}, nil
}

// GetVolume implements sandboxv1.SandboxServiceServer.
func (s *Service) GetVolume(ctx context.Context, req *sandboxv1.GetVolumeRequest) (*sandboxv1.GetVolumeResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	v, err := s.m.GetVolume(ctx, req.GetVolume())
	if err != nil {
		return nil, s.fail(ctx, "GetVolume", err)
	}
	return &sandboxv1.GetVolumeResponse{Volume: volumeToProto(v)}, nil
}

// ListVolumes implements sandboxv1.SandboxServiceServer.
func (s *Service) ListVolumes(ctx context.Context, req *sandboxv1.ListVolumesRequest) (*sandboxv1.ListVolumesResponse, error) {
	vols, err := s.m.ListVolumes(ctx, req.GetTenant())
	if err != nil {
		return nil, s.fail(ctx, "ListVolumes", err)
	}
	out := &sandboxv1.ListVolumesResponse{Volumes: make([]*sandboxv1.Volume, 0, len(vols))}
	for _, v := range vols {
		out.Volumes = append(out.Volumes, volumeToProto(v))
	}
	return out, nil
}

// DeleteVolume implements sandboxv1.SandboxServiceServer.
func (s *Service) DeleteVolume(ctx context.Context, req *sandboxv1.DeleteVolumeRequest) (*sandboxv1.DeleteVolumeResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	if err := s.m.DeleteVolume(ctx, req.GetVolume(), req.GetForce()); err != nil {
		return nil, s.fail(ctx, "DeleteVolume", err)
	}
	return &sandboxv1.DeleteVolumeResponse{}, nil
}

// UploadVolumeFile implements sandboxv1.SandboxServiceServer, as
// UploadFile does: the header first, then chunks read as they are needed,
// the size bounded by the domain (Policy.MaxUploadBytes).
func (s *Service) UploadVolumeFile(stream grpc.ClientStreamingServer[sandboxv1.UploadVolumeFileRequest, sandboxv1.UploadVolumeFileResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("empty upload: the first message must carry the header")
	}
	if err != nil {
		return s.fail(ctx, "UploadVolumeFile", err)
	}
	h := first.GetHeader()
	if h == nil {
		return invalid("the first message must carry the header (volume and path), not a chunk")
	}
	if err := required("volume", h.GetVolume()); err != nil {
		return err
	}
	if err := required("path", h.GetPath()); err != nil {
		return err
	}
	r := &uploadReader{recv: func() ([]byte, bool, error) {
		msg, err := stream.Recv()
		return msg.GetChunk(), msg.GetHeader() != nil, err
	}}
	info, err := s.m.VolumeUpload(ctx, h.GetVolume(), h.GetPath(), r, h.GetOverwrite())
	if r.err != nil {
		return s.fail(ctx, "UploadVolumeFile", r.err)
	}
	if err != nil {
		return s.fail(ctx, "UploadVolumeFile", err)
	}
	return stream.SendAndClose(&sandboxv1.UploadVolumeFileResponse{File: volumeFileToProto(info)})
}

// DownloadVolumeFile implements sandboxv1.SandboxServiceServer, in
// DownloadFile's chunks.
func (s *Service) DownloadVolumeFile(req *sandboxv1.DownloadVolumeFileRequest, stream grpc.ServerStreamingServer[sandboxv1.DownloadVolumeFileResponse]) error {
	ctx := stream.Context()
	if err := required("volume", req.GetVolume()); err != nil {
		return err
	}
	if err := required("path", req.GetPath()); err != nil {
		return err
	}
	rc, info, err := s.m.VolumeDownload(ctx, req.GetVolume(), req.GetPath())
	if err != nil {
		return s.fail(ctx, "DownloadVolumeFile", err)
	}
	defer rc.Close()
	return s.sendChunks(ctx, "DownloadVolumeFile", req.GetPath(), rc, func(first bool, chunk []byte) error {
		msg := &sandboxv1.DownloadVolumeFileResponse{Chunk: chunk}
		if first {
			msg.File = volumeFileToProto(info)
		}
		return stream.Send(msg)
	})
}

// ListVolumeFiles implements sandboxv1.SandboxServiceServer. Depth 0 is 1,
// as in ListFiles; the domain checks the range.
func (s *Service) ListVolumeFiles(ctx context.Context, req *sandboxv1.ListVolumeFilesRequest) (*sandboxv1.ListVolumeFilesResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	depth := int(req.GetDepth())
	if depth == 0 {
		depth = 1
	}
	files, err := s.m.VolumeListFiles(ctx, req.GetVolume(), req.GetPath(), depth)
	if err != nil {
		return nil, s.fail(ctx, "ListVolumeFiles", err)
	}
	return &sandboxv1.ListVolumeFilesResponse{Files: volumeFilesToProto(files)}, nil
}

// StatVolumeFile implements sandboxv1.SandboxServiceServer.
func (s *Service) StatVolumeFile(ctx context.Context, req *sandboxv1.StatVolumeFileRequest) (*sandboxv1.StatVolumeFileResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	info, err := s.m.VolumeStat(ctx, req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, s.fail(ctx, "StatVolumeFile", err)
	}
	return &sandboxv1.StatVolumeFileResponse{File: volumeFileToProto(info)}, nil
}

// MakeVolumeDirectory implements sandboxv1.SandboxServiceServer.
func (s *Service) MakeVolumeDirectory(ctx context.Context, req *sandboxv1.MakeVolumeDirectoryRequest) (*sandboxv1.MakeVolumeDirectoryResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	info, err := s.m.VolumeMakeDirectory(ctx, req.GetVolume(), req.GetPath(), req.GetParents())
	if err != nil {
		return nil, s.fail(ctx, "MakeVolumeDirectory", err)
	}
	return &sandboxv1.MakeVolumeDirectoryResponse{File: volumeFileToProto(info)}, nil
}

// RemoveVolumeFile implements sandboxv1.SandboxServiceServer.
func (s *Service) RemoveVolumeFile(ctx context.Context, req *sandboxv1.RemoveVolumeFileRequest) (*sandboxv1.RemoveVolumeFileResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	if err := s.m.VolumeRemove(ctx, req.GetVolume(), req.GetPath(), req.GetRecursive()); err != nil {
		return nil, s.fail(ctx, "RemoveVolumeFile", err)
	}
	return &sandboxv1.RemoveVolumeFileResponse{}, nil
}

// SetVolumeFileAttributes implements sandboxv1.SandboxServiceServer. The
// mode's bits are the protocol's (0o7777, as chmod takes them) and become
// the domain's fs.FileMode here; the domain judges them.
func (s *Service) SetVolumeFileAttributes(ctx context.Context, req *sandboxv1.SetVolumeFileAttributesRequest) (*sandboxv1.SetVolumeFileAttributesResponse, error) {
	if err := required("volume", req.GetVolume()); err != nil {
		return nil, err
	}
	var a core.FileAttributes
	if req.Uid != nil {
		uid := req.GetUid()
		a.UID = &uid
	}
	if req.Gid != nil {
		gid := req.GetGid()
		a.GID = &gid
	}
	if req.Mode != nil {
		m := req.GetMode()
		if m > 0o7777 {
			return nil, invalid("mode %#o: want permission bits (at most 0o7777)", m)
		}
		fm := core.ChmodMode(m)
		a.Mode = &fm
	}
	info, err := s.m.VolumeSetAttributes(ctx, req.GetVolume(), req.GetPath(), a)
	if err != nil {
		return nil, s.fail(ctx, "SetVolumeFileAttributes", err)
	}
	return &sandboxv1.SetVolumeFileAttributesResponse{File: volumeFileToProto(info)}, nil
}
