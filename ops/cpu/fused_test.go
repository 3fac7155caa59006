package cpu

import (
	"math"
	"testing"
)

// TestSiluMulFused checks the fused-input SiLU-and-multiply against SiluMul on the two halves.
func TestSiluMulFused(t *testing.T) {
	b := New(2)
	defer b.Close()
	rows, cols := 5, 37
	gu := FromFloat32(make([]float32, rows*2*cols), rows, 2*cols)
	gate, up := FromFloat32(make([]float32, rows*cols), rows, cols), FromFloat32(make([]float32, rows*cols), rows, cols)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			g, u := float32(math.Sin(float64(r*cols+c)))*3, float32(math.Cos(float64(r+c)))
			gu.f32[r*2*cols+c], gu.f32[r*2*cols+cols+c] = g, u
			gate.f32[r*cols+c], up.f32[r*cols+c] = g, u
		}
	}
	got, want := b.Buffer(rows, cols).(*Tensor), b.Buffer(rows, cols).(*Tensor)
	b.SiluMulFused(got, gu)
	b.SiluMul(want, gate, up)
	for i := range want.f32 {
		if got.f32[i] != want.f32[i] {
			t.Fatalf("element %d: fused %v, separate %v", i, got.f32[i], want.f32[i])
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a gate|up of the wrong width")
		}
	}()
	b.SiluMulFused(got, gate)
}

// TestSplitCols splits rows of three ranges and checks every element lands in its part.
func TestSplitCols(t *testing.T) {
	b := New(1)
	defer b.Close()
	rows, widths := 4, []int{6, 2, 3}
	src := FromFloat32(make([]float32, rows*11), rows, 11)
	for i := range src.f32 {
		src.f32[i] = float32(i)
	}
	parts := []*Tensor{FromFloat32(make([]float32, (rows+1)*6), rows+1, 6), FromFloat32(make([]float32, rows*2), rows, 2),
		FromFloat32(make([]float32, rows*3), rows, 3)}
	b.SplitCols(src, parts[0], parts[1], parts[2])
	for r := 0; r < rows; r++ {
		at := 0
		for p, w := range widths {
			for c := 0; c < w; c++ {
				if got, want := parts[p].f32[r*w+c], float32(r*11+at+c); got != want {
					t.Fatalf("row %d part %d col %d: %v, want %v", r, p, c, got, want)
				}
			}
			at += w
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for parts that do not add up")
		}
	}()
	b.SplitCols(src, parts[0], parts[1])
}
