package main

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"math"
	"sync"
)

// The image and audio payloads are generated rather than embedded as opaque
// base64 literals, so a reader can see exactly what is being sent and the
// bytes are guaranteed to be well-formed files of their declared MIME type.

// redPixelPNG returns a 1x1 red PNG image.
var redPixelPNG = sync.OnceValue(func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 0xff, A: 0xff})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic(err) // encoding to memory cannot fail
	}
	return buf.Bytes()
})

// toneWAV returns a short 440 Hz tone as a mono 16-bit PCM WAV file.
var toneWAV = sync.OnceValue(func() []byte {
	const (
		sampleRate = 8000
		samples    = sampleRate / 20 // 50 ms keeps the payload small
		bitsPer    = 16
		channels   = 1
	)
	pcm := make([]int16, samples)
	for i := range pcm {
		pcm[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(i)/sampleRate))
	}
	dataLen := uint32(len(pcm) * bitsPer / 8)

	var buf bytes.Buffer
	w := func(v any) { _ = binary.Write(&buf, binary.LittleEndian, v) } // bytes.Buffer writes cannot fail
	buf.WriteString("RIFF")
	w(uint32(36 + dataLen))
	buf.WriteString("WAVE")
	buf.WriteString("fmt ")
	w(uint32(16)) // fmt chunk size
	w(uint16(1))  // PCM
	w(uint16(channels))
	w(uint32(sampleRate))
	w(uint32(sampleRate * channels * bitsPer / 8)) // byte rate
	w(uint16(channels * bitsPer / 8))              // block align
	w(uint16(bitsPer))
	buf.WriteString("data")
	w(dataLen)
	w(pcm)
	return buf.Bytes()
})
