package tokenizer

import (
	"strings"
	"testing"
)

// benchText is a mixed ~2,500-token text: prose, code, numbers, CJK, emoji.
var benchText = strings.Repeat("The quick brown fox jumps over the lazy dog; it's 1234567 times faster than 3.14159 snails. "+
	"def main():\n\tprint(\"hello, world\")  # comment\n    return 0\n\n"+
	"Café déjà vu — 你好，世界！😀👍🏽 <|im_start|>user\nHi<|im_end|>\n", 30)

func benchmarkEncode(b *testing.B, name string) {
	tok := externalTokenizer(b, name)
	ids, err := tok.Encode(benchText, false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(ids)), "tokens/op")
	b.SetBytes(int64(len(benchText)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tok.Encode(benchText, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeQwen3 encodes a long text with Qwen3's tokenizer (NFC,
// Split regex with look-ahead, byte-level BPE).
func BenchmarkEncodeQwen3(b *testing.B) { benchmarkEncode(b, "qwen3") }

// BenchmarkEncodeLlama3 encodes a long text with Llama 3's tokenizer.
func BenchmarkEncodeLlama3(b *testing.B) { benchmarkEncode(b, "llama3_1") }

// BenchmarkEncodeLlama2 encodes a long text with Llama 2's sentencepiece-style
// tokenizer (byte_fallback, no pre-tokenizer).
func BenchmarkEncodeLlama2(b *testing.B) { benchmarkEncode(b, "llama2") }
