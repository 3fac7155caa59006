package tokenizer

import (
	"fmt"
	"testing"
)

// benchConversation is a 20-turn conversation with a system prompt.
func benchConversation() []Message {
	msgs := []Message{{Role: "system", Content: "You are a helpful assistant. Answer briefly."}}
	for i := range 10 {
		msgs = append(msgs,
			Message{Role: "user", Content: fmt.Sprintf("Question %d: what is %d + %d? Please explain the steps.", i, i, i*7)},
			Message{Role: "assistant", Content: fmt.Sprintf("<think>\nAdd them.\n</think>\n\nThe answer is %d: add the units, then the tens.", i+i*7)})
	}
	return append(msgs, Message{Role: "user", Content: "Thanks! One more: what is 12 * 12?"})
}

func benchmarkRenderChat(b *testing.B, name string) {
	tok := externalTokenizer(b, name)
	msgs := benchConversation()
	out, err := tok.ApplyChatTemplate(msgs, true)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := tok.ApplyChatTemplate(msgs, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderChatQwen3 renders a 21-message conversation with Qwen3's
// template (reasoning, tool branches, loops over messages in reverse).
func BenchmarkRenderChatQwen3(b *testing.B) { benchmarkRenderChat(b, "qwen3") }

// BenchmarkRenderChatLlama3 renders it with Llama 3.1's template (tools
// branches, strftime, namespace).
func BenchmarkRenderChatLlama3(b *testing.B) { benchmarkRenderChat(b, "llama3_1") }
