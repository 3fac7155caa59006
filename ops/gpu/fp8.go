package gpu

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// fp8MaxGemvRows is the largest batch whose Linear streams the FP8 codes through the skinny
// kernel; larger ones run the tensor-core FP8 GEMM, which reads the codes at about the copy
// rate from 4 rows on (the Llama-3-8B gate|up on an H100: 51 us at 8 rows, the skinny kernel
// 130 us, bf16 84 us; the GEMM takes no batch below 4).
const fp8MaxGemvRows = 3

// fp8Weight uploads an FP8 weight [N, K] as it is stored, one byte an element, with its float32
// scales in rows padded to the GEMM's stride; the scratch (a dequantized weight, or the FP8
// GEMM's quantized activations) grows to the largest such weight now, so that no allocation
// happens inside a graph capture. A per-channel (or per-tensor) weight, one scale a row, is a
// block-scaled one of [1, K rounded up to 16] blocks: the kernels' chunks never cross a block.
func (b *Backend) fp8Weight(name string, d ops.WeightDesc, shape []int, raw [][]byte) (ops.Tensor, error) {
	sc := d.Scales
	if len(shape) != 2 {
		return nil, fmt.Errorf("weight %s: %w: %v weight of shape %v (the gpu serves fp8 Linear weights, not fp8 experts yet)",
			name, ops.ErrUnsupportedWeight, d.Format, shape)
	}
	if d.DType != ops.F8E4M3 || sc == nil || sc.DType != ops.F32 || len(sc.Block) != 2 {
		return nil, fmt.Errorf("weight %s: %w: %v of %v without float32 [2]-block scales", name, ops.ErrUnsupportedWeight, d.Format, d.DType)
	}
	n, k, bn, bk := shape[0], shape[1], sc.Block[0], sc.Block[1]
	want := []int{(n + bn - 1) / bn, (k + bk - 1) / bk}
	if d.Format == ops.ChannelFP8 {
		if bn != 1 || bk != k {
			return nil, fmt.Errorf("weight %s: per-channel fp8 [%d, %d] in %dx%d blocks (want 1x%d)", name, n, k, bn, bk, k)
		}
		want, bk = []int{n}, (k+15)/16*16
	}
	if n < 1 || k < 8 || k%8 != 0 || bn < 1 || bk < 16 || bk%16 != 0 {
		return nil, fmt.Errorf("weight %s: %w: [%d, %d] in %dx%d blocks (the gpu fp8 kernels need K in multiples of 8 and "+
			"the block's K in multiples of 16)", name, ops.ErrUnsupportedWeight, n, k, bn, bk)
	}
	if !slices.Equal(sc.Shape, want) {
		return nil, fmt.Errorf("weight %s: scales %v for [%d, %d] in %dx%d blocks (want %v)", name, sc.Shape, n, k, bn, bk, want)
	}
	srows, scols := (n+bn-1)/bn, (k+bk-1)/bk
	if got := partsLen(raw); got != n*k {
		return nil, fmt.Errorf("weight %s: %d fp8 bytes for [%d, %d]", name, got, n, k)
	}
	if got, want := partsLen(sc.Raw), 4*srows*scols; got != want {
		return nil, fmt.Errorf("weight %s: %d scale bytes (want %d)", name, got, want)
	}
	stride := (k + 15) / 16 * 16 // whole 16-byte chunks a row: the kernels' loads
	codes, err := b.alloc(n * stride)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	sstride := hipkernels.FP8ScaleStride(k, bk)
	scales, err := b.alloc(4 * srows * sstride)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	if err := b.copyRows(codes, raw, k, stride); err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	if err := b.copyRows(scales, sc.Raw, 4*scols, 4*sstride); err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	if err := b.ensure(&b.fp8Scratch, n*k*b.dt.Size()); err != nil {
		return nil, fmt.Errorf("weight %s: dequantization scratch: %w", name, err)
	}
	return &Tensor{ptr: codes, dt: ops.F8E4M3, shape: []int{n, k},
		fp8: &hipkernels.FP8Weight{Codes: codes, Scales: scales, N: n, K: k, Stride: stride, BlockN: bn, BlockK: bk,
			ScaleStride: sstride}}, nil
}

// copyRows queues the rows of width bytes in parts to dst, stride bytes apart (the padding
// zeroed), through the staging buffers. Unpadded rows go as the bytes come; padded ones need
// parts of whole rows (a fused weight's parts are row ranges).
func (b *Backend) copyRows(dst hipkernels.Ptr, parts [][]byte, width, stride int) error {
	if width == stride {
		return b.copyBytes(dst, parts)
	}
	per := max(1, b.chunk/stride) // rows a staging buffer takes
	at := dst
	for _, p := range parts {
		if width == 0 || len(p)%width != 0 {
			return fmt.Errorf("a part of %d bytes is not whole rows of %d", len(p), width)
		}
		for lo := 0; lo < len(p)/width; lo += per {
			rows := min(per, len(p)/width-lo)
			src := p[lo*width : (lo+rows)*width]
			err := b.stage(at, rows*stride, func(buf []byte) {
				for r := range rows {
					d := buf[r*stride : (r+1)*stride]
					clear(d[copy(d, src[r*width:(r+1)*width]):])
				}
			})
			if err != nil {
				return err
			}
			at += hipkernels.Ptr(rows * stride)
		}
	}
	return nil
}

// copyBytes queues parts one after the other to dst through the staging buffers.
func (b *Backend) copyBytes(dst hipkernels.Ptr, parts [][]byte) error {
	for _, p := range parts {
		for lo := 0; lo < len(p); lo += b.chunk {
			src := p[lo:min(lo+b.chunk, len(p))]
			if err := b.stage(dst+hipkernels.Ptr(lo), len(src), func(buf []byte) { copy(buf, src) }); err != nil {
				return err
			}
		}
		dst += hipkernels.Ptr(len(p))
	}
	return nil
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// fp8GemmRowGroup: the FP8 GEMM's batches are multiples of it (cuBLASLt 13.1 on an H100 finds
// block-scaled FP8 algorithms for m = 4, 8, 12, ... and none for other m).
const fp8GemmRowGroup = 4

// linearFP8 is Linear of a block-scaled FP8 weight: the skinny kernel over the codes for decode
// batches, else the tensor-core FP8 GEMM, or where the library has none the weight dequantized
// into the scratch and the 16-bit GEMM.
func (b *Backend) linearFP8(o, x *Tensor, w *hipkernels.FP8Weight, bias hipkernels.Ptr, m int) {
	if m <= fp8MaxGemvRows {
		b.must("Linear", b.lib.GemvFP8(b.kdt, o.ptr, x.ptr, w, bias, m, b.stream))
		return
	}
	// cuBLASLt's block-scaled FP8 GEMM takes whole groups of rows (fp8GemmRowGroup). A batch of
	// another size ends with one more group, its last rows, which recomputes the rows it shares
	// with the groups before it (the same quantized activations): every row takes the same path.
	es := hipkernels.Ptr(b.dt.Size())
	whole := m &^ (fp8GemmRowGroup - 1)
	done := b.gemmFP8(o, x, w, bias, 0, whole)
	if done == whole && whole < m && b.gemmFP8(o, x, w, bias, m-fp8GemmRowGroup, fp8GemmRowGroup) == fp8GemmRowGroup {
		done = m
	}
	if done == m {
		return
	}
	b.must("Linear", b.lib.DequantFP8(b.kdt, b.fp8Scratch.ptr, w, b.stream))
	b.must("Linear", b.lib.GemmBias(b.blas, b.stream, b.kdt, b.kdt, o.ptr+hipkernels.Ptr(done*w.N)*es,
		x.ptr+hipkernels.Ptr(done*w.K)*es, b.fp8Scratch.ptr, bias, m-done, w.N, w.K))
}

// gemmFP8 queues the FP8 GEMM of rows row0.. row0+m-1 of x (m a multiple of fp8GemmRowGroup) and
// returns how many of the first it could serve: all m,
// or fewer where the library has no FP8 GEMM for the dtype, blocks or shape (said once in the
// log). The quantized activations go into the scratch, which the GEMM's fallback alone uses
// otherwise: as many rows a call as their codes fit.
func (b *Backend) gemmFP8(o, x *Tensor, w *hipkernels.FP8Weight, bias hipkernels.Ptr, row0, m int) int {
	per := b.fp8Scratch.size / hipkernels.FP8ActBytes(1, w.K) &^ (fp8GemmRowGroup - 1)
	if b.dt == ops.F32 || w.BlockN != 128 || w.BlockK != 128 || per < 1 {
		return 0
	}
	es := hipkernels.Ptr(b.dt.Size())
	for i := 0; i < m; i += per {
		rows := min(per, m-i)
		r := row0 + i
		err := b.lib.GemmFP8(b.blas, b.stream, b.kdt, o.ptr+hipkernels.Ptr(r*w.N)*es, x.ptr+hipkernels.Ptr(r*w.K)*es,
			b.fp8Scratch.ptr, w, bias, rows)
		if hipkernels.IsStatus(err, hipkernels.StatusUnsupported) {
			if !b.fp8Unsupported {
				b.fp8Unsupported = true
				slog.Warn("gpu: no tensor-core FP8 GEMM here; FP8 weights are dequantized for batches above "+
					strconv.Itoa(fp8MaxGemvRows)+" rows", "err", err)
			}
			return i
		}
		b.must("Linear", err)
	}
	return m
}
