package imagefit_test

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/sandboxd/sandboxd/agent/imagefit"
)

func encodePNG(t *testing.T, w, h int, noisy bool) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(x), uint8(y), 100, 255}
			if noisy {
				c = color.RGBA{uint8(r.UintN(256)), uint8(r.UintN(256)), uint8(r.UintN(256)), 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFit(t *testing.T) {
	lim := imagefit.Limits{MaxSide: 200, MaxBytes: 64 << 10}
	for _, tc := range []struct {
		name          string
		in            []byte
		wantMIME      string
		wantW, wantH  int
		wantUnchanged bool
	}{
		{"small stays as is", encodePNG(t, 100, 50, false), "image/png", 100, 50, true},
		{"wide is scaled to max side", encodePNG(t, 800, 400, false), "image/png", 200, 100, false},
		{"tall is scaled to max side", encodePNG(t, 300, 600, false), "image/png", 100, 200, false},
		{"noise becomes JPEG to fit bytes", encodePNG(t, 400, 400, true), "image/jpeg", 200, 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, mime, err := imagefit.Fit(tc.in, lim)
			if err != nil {
				t.Fatal(err)
			}
			if mime != tc.wantMIME {
				t.Errorf("MIME %s, want %s", mime, tc.wantMIME)
			}
			cfg, _, err := image.DecodeConfig(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("output does not decode: %v", err)
			}
			if cfg.Width != tc.wantW || cfg.Height != tc.wantH {
				t.Errorf("size %dx%d, want %dx%d", cfg.Width, cfg.Height, tc.wantW, tc.wantH)
			}
			if len(out) > lim.MaxBytes {
				t.Errorf("%d bytes, above the %d limit", len(out), lim.MaxBytes)
			}
			if tc.wantUnchanged != bytes.Equal(out, tc.in) {
				t.Errorf("unchanged = %v, want %v", bytes.Equal(out, tc.in), tc.wantUnchanged)
			}
		})
	}
}

func TestFitRejectsOtherData(t *testing.T) {
	if _, _, err := imagefit.Fit([]byte("<svg/>"), imagefit.DefaultLimits); !errors.Is(err, imagefit.ErrUnsupported) {
		t.Errorf("Fit(svg) = %v, want ErrUnsupported", err)
	}
}
