package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

func TestIsPrefill(t *testing.T) {
	m := &ops.AttnMetadata{Positions: []int32{0, 1, 2, 7, 40}, QueryStart: []int32{0, 3, 4, 4, 5}, SeqLens: []int32{3, 8, 9, 41}}
	require.True(t, isPrefill(m))
	m.Positions[1] = 5 // not the last positions of its sequence, in order
	require.False(t, isPrefill(m))
	decodes := &ops.AttnMetadata{Positions: []int32{7, 40}, QueryStart: []int32{0, 1, 2}, SeqLens: []int32{8, 41}}
	require.False(t, isPrefill(decodes), "decodes only")
}

func TestBuildTiles(t *testing.T) {
	// Sequence 0: 20 tokens after 30 cached, group 4 -> 80 packed rows, tiles at rows 0 and 64;
	// sequence 1: a decode at context 100 -> 4 rows; sequence 2: no tokens.
	got := buildTiles(nil, []int32{0, 20, 21, 21}, []int32{50, 100, 7}, 4, 64)
	want := []tileWork{{seq: 1, row0: 0, end: 100}, {seq: 0, row0: 64, end: 50}, {seq: 0, row0: 0, end: 46}}
	require.Equal(t, want, got)
	// Every packed row is covered once.
	for _, g := range []int{1, 3, 8} {
		rows := 0
		for _, w := range buildTiles(nil, []int32{0, 70, 71}, []int32{70, 9}, g, 64) {
			rows += min(64, []int{70 * g, g}[w.seq]-int(w.row0))
		}
		require.Equal(t, 71*g, rows, "group %d", g)
	}
}

func TestOneTokenPerSequence(t *testing.T) {
	for _, tc := range []struct {
		qstart []int32
		want   bool
	}{
		{[]int32{0, 1, 2, 3}, true},
		{[]int32{0, 1}, true},
		{[]int32{0, 2, 3}, false},
		{[]int32{0, 1, 1, 2}, false},
	} {
		m := &ops.AttnMetadata{QueryStart: tc.qstart, SeqLens: make([]int32, len(tc.qstart)-1)}
		require.Equal(t, tc.want, oneTokenPerSequence(m), "query starts %v", tc.qstart)
	}
}
