// Command chat asks an OpenAI-compatible server one question and prints the streamed answer:
//
//	chat --url http://127.0.0.1:8000 "What is the capital of France?"
//
// It waits for the server's /health first, so it can be started right after the server.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8000", "server address")
	model := flag.String("model", "", "model name (default: the server's first model)")
	maxTokens := flag.Int("max-tokens", 128, "answer length limit")
	wait := flag.Duration("wait", 60*time.Second, "how long to wait for the server to become healthy")
	flag.Parse()
	question := strings.Join(flag.Args(), " ")
	if question == "" {
		question = "What is the capital of France? Answer in one sentence."
	}
	if err := run(*url, *model, question, *maxTokens, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "chat:", err)
		os.Exit(1)
	}
}

func run(url, model, question string, maxTokens int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server at %s not healthy after %s", url, wait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": maxTokens, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": question}}})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("server answered %s: %v", resp.Status, e)
	}
	fmt.Printf("> %s\n", question)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			fmt.Println()
			return nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return err
		}
		if chunk.Error != nil {
			return fmt.Errorf("server: %s", chunk.Error.Message)
		}
		for _, c := range chunk.Choices {
			fmt.Print(c.Delta.Content)
		}
	}
	return fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}
