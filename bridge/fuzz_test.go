package bridge

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeExecuteModel feeds arbitrary bytes to the payload decoder: it must never panic or
// allocate without bound, and what it accepts must survive an encode/decode round trip.
func FuzzDecodeExecuteModel(f *testing.F) {
	good, err := EncodeExecuteModel(validPayload())
	require.NoError(f, err)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(good[:len(good)/3])
	empty, err := EncodeExecuteModel(&ExecuteModelPayload{WireVersion: WireVersion})
	require.NoError(f, err)
	f.Add(empty)
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdf, 0x00, 0x00, 0x00, 0x01, 0xa1, 'x', 0xc0})
	f.Add([]byte{0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}) // timestamp extension
	f.Add(append(bytesOf(0x91, 20), 0x00))
	f.Add(encode(f, map[string]any{"wire_version": 1, "num_scheduled_tokens": map[string]int{"a": 1}}))
	f.Add(encode(f, map[string]any{"wire_version": 1, "scheduled_new_reqs": []any{map[string]any{
		"req_id": "r", "prompt_token_ids": []int{1 << 40}, "block_ids": []any{[]int{0}}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeExecuteModel(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidPayload)
			return
		}
		again, err := EncodeExecuteModel(p)
		require.NoError(t, err)
		_, err = DecodeExecuteModel(again)
		require.NoError(t, err)
	})
}

// FuzzCheckMsgpack checks the structural scanner alone against arbitrary bytes.
func FuzzCheckMsgpack(f *testing.F) {
	f.Add([]byte{0x92, 0x01, 0xa1, 'a'})
	f.Add([]byte{0xde, 0x00, 0x01, 0xc0, 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) { _ = CheckMsgpack(b) })
}
