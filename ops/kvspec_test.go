package ops

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVCacheSpecBytes: the bytes a block takes follow each layer's kind, heads, size and dtype.
func TestKVCacheSpecBytes(t *testing.T) {
	pair := KVLayerSpec{Kind: KVPair, Heads: 8, HeadDim: 128, DType: BF16}
	latent := KVLayerSpec{Kind: KVLatent, Heads: 1, HeadDim: 512 + 64, DType: BF16}
	for _, tc := range []struct {
		name  string
		spec  KVCacheSpec
		block int
		want  int64
	}{
		{"k/v", KVCacheSpec{Layers: []KVLayerSpec{pair, pair}, Ranks: 1}, 16, 2 * 2 * 8 * 128 * 2 * 16},
		{"float32", KVCacheSpec{Layers: []KVLayerSpec{{Kind: KVPair, Heads: 2, HeadDim: 16, DType: F32}}, Ranks: 1}, 4, 2 * 2 * 16 * 4 * 4},
		{"latent", KVCacheSpec{Layers: []KVLayerSpec{latent}, Ranks: 1}, 16, 576 * 2 * 16},
		{"mixed", KVCacheSpec{Layers: []KVLayerSpec{pair, latent}, Ranks: 2}, 1, 2*8*128*2 + 576*2},
		{"empty", KVCacheSpec{}, 16, 0},
	} {
		require.Equal(t, tc.want, tc.spec.BlockBytes(tc.block), tc.name)
	}
}

// kvBackend answers NewKVCache only.
type kvBackend struct {
	Backend
	got []int
}

type kvCache struct{}

func (kvCache) Geometry() (int, int, int, int) { return 0, 0, 0, 0 }

func (b *kvBackend) Name() string { return "test" }

func (b *kvBackend) NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim int) (KVCache, error) {
	b.got = []int{layers, numBlocks, blockSize, kvHeads, headDim}
	return kvCache{}, nil
}

// TestNewKVCacheFor: a uniform K/V spec becomes the backends' cache, sliding-window layers
// (gpt-oss's alternate ones) included, kept whole; a latent layer, a negative window or layers
// of different shapes are refused until a backend holds them.
func TestNewKVCacheFor(t *testing.T) {
	pair := KVLayerSpec{Kind: KVPair, Heads: 2, HeadDim: 16, DType: F32}
	window := pair
	window.SlidingWindow = 128
	be := &kvBackend{}
	_, err := NewKVCacheFor(be, KVCacheSpec{Layers: []KVLayerSpec{window, pair, window}, Ranks: 1}, 10, 4)
	require.NoError(t, err)
	require.Equal(t, []int{3, 10, 4, 2, 16}, be.got)
	wide, negative, latent := pair, pair, pair
	wide.Heads, negative.SlidingWindow, latent.Kind = 4, -1, KVLatent
	for _, other := range []KVLayerSpec{wide, negative, latent} {
		be := &kvBackend{}
		_, err := NewKVCacheFor(be, KVCacheSpec{Layers: []KVLayerSpec{pair, other}, Ranks: 1}, 10, 4)
		require.True(t, errors.Is(err, ErrUnsupportedKVCache), "%+v: %v", other, err)
		require.Nil(t, be.got)
	}
	_, err = NewKVCacheFor(be, KVCacheSpec{}, 10, 4)
	require.ErrorIs(t, err, ErrUnsupportedKVCache)
}

// TestWeightDesc: only an unquantized descriptor without scales has a plain dtype.
func TestWeightDesc(t *testing.T) {
	dt, err := Plain(BF16).PlainDType()
	require.NoError(t, err)
	require.Equal(t, BF16, dt)
	_, err = WeightDesc{Format: WeightFormat(7), DType: BF16}.PlainDType()
	require.ErrorIs(t, err, ErrUnsupportedWeight)
	_, err = WeightDesc{DType: BF16, Scales: &WeightScales{DType: F32}}.PlainDType()
	require.ErrorIs(t, err, ErrUnsupportedWeight)
}

// TestNewKVCacheForFP8: an fp8 spec on a backend without FP8KVBackend is refused as an
// unsupported cache (what lets --device auto fall back to the cpu).
func TestNewKVCacheForFP8(t *testing.T) {
	f8 := KVLayerSpec{Kind: KVPair, Heads: 2, HeadDim: 16, DType: F8E4M3, KScale: 1, VScale: 1}
	be := &kvBackend{}
	_, err := NewKVCacheFor(be, KVCacheSpec{Layers: []KVLayerSpec{f8, f8}, Ranks: 1}, 10, 4)
	require.ErrorIs(t, err, ErrUnsupportedKVCache)
	require.ErrorContains(t, err, "fp8 KV cache")
	require.Nil(t, be.got)
	require.Equal(t, int64(2*2*16*4), KVCacheSpec{Layers: []KVLayerSpec{f8}}.BlockBytes(4))
}
