// Package imagefit shrinks images to what vision models accept: a bounded
// size in pixels and in bytes. Providers scale large images down anyway
// (and bill for the pixels they keep), so sending a 1500x1500 plot costs
// tokens and bandwidth for detail the model never sees.
package imagefit

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"

	xdraw "golang.org/x/image/draw"
)

// Limits bound a fitted image.
type Limits struct {
	// MaxSide is the longest side in pixels.
	MaxSide int
	// MaxBytes is the encoded size above which a PNG is re-encoded as JPEG.
	MaxBytes int
}

// DefaultLimits suit the common providers: OpenAI scales to fit 2048 and
// then 768 on the short side, Anthropic to 1568 on the long side; 1024 keeps
// charts legible at a fraction of the cost.
var DefaultLimits = Limits{MaxSide: 1024, MaxBytes: 512 << 10}

// ErrUnsupported is returned for formats other than PNG and JPEG.
var ErrUnsupported = errors.New("unsupported image format (want PNG or JPEG)")

// Fit returns data (PNG or JPEG) scaled to fit lim, and its MIME type. An
// image already within the limits is returned unchanged.
func Fit(data []byte, lim Limits) ([]byte, string, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if format != "png" && format != "jpeg" {
		return nil, "", fmt.Errorf("%w: got %s", ErrUnsupported, format)
	}
	mime := "image/" + format
	if max(cfg.Width, cfg.Height) <= lim.MaxSide && len(data) <= lim.MaxBytes {
		return data, mime, nil
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("decoding %s: %w", format, err)
	}
	img := scale(src, lim.MaxSide)
	var buf bytes.Buffer
	if format == "png" {
		if err := png.Encode(&buf, img); err != nil {
			return nil, "", err
		}
		if buf.Len() <= lim.MaxBytes {
			return buf.Bytes(), "image/png", nil
		}
		buf.Reset()
	}
	// Photos and noisy plots compress badly as PNG; JPEG has no alpha, so
	// flatten onto white (the usual plot background).
	flat := image.NewRGBA(img.Bounds())
	draw.Draw(flat, flat.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	draw.Draw(flat, flat.Bounds(), img, img.Bounds().Min, draw.Over)
	if err := jpeg.Encode(&buf, flat, &jpeg.Options{Quality: 85}); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), "image/jpeg", nil
}

// scale returns src shrunk so that its longest side is at most maxSide,
// keeping the aspect ratio; src itself when it is small enough.
func scale(src image.Image, maxSide int) image.Image {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if max(w, h) <= maxSide {
		return src
	}
	if w >= h {
		h, w = max(1, h*maxSide/w), maxSide
	} else {
		w, h = max(1, w*maxSide/h), maxSide
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	xdraw.CatmullRom.Scale(dst, dst.Bounds(), src, b, xdraw.Over, nil)
	return dst
}
