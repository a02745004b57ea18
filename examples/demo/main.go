// Command demo delivers one webhook event three times through the gateway,
// the way a provider that timed out and retried would (two of the
// deliveries race each other), then asks the CRM how many deals exist.
// In its second act the CRM creates a deal and drops the connection; the
// provider's retry gets that same deal, which the gateway looked up by
// the event's key (the route's verify rule).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

type delivery struct {
	attempt  int
	status   int
	replayed string
	body     string
	err      error
}

func deliver(client *http.Client, url, eventID string, attempt int) delivery {
	payload, _ := json.Marshal(map[string]any{
		"id":               eventID,
		"type":             "deal.create",
		"delivery_attempt": attempt,
		"data":             map[string]any{"title": "Acme renewal", "amount": 4200, "currency": "EUR"},
	})
	req, err := http.NewRequest(http.MethodPost, url+"/crm/deals", bytes.NewReader(payload))
	if err != nil {
		return delivery{attempt: attempt, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer demo-provider")
	req.Header.Set("X-Demo-Delay", "300ms")
	resp, err := client.Do(req)
	if err != nil {
		return delivery{attempt: attempt, err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return delivery{attempt: attempt, status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed"), body: string(bytes.TrimSpace(body))}
}

func main() {
	gateway := flag.String("gateway", "http://127.0.0.1:8080", "gateway base URL")
	upstream := flag.String("upstream", "http://127.0.0.1:9001", "CRM upstream base URL (for /stats)")
	event := flag.String("event", fmt.Sprintf("evt_%d", time.Now().UnixNano()%1000000), "webhook event id")
	flag.Parse()

	client := &http.Client{Timeout: 15 * time.Second}
	if err := waitReady(client, *upstream+"/stats", *gateway+"/"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	print := func(d delivery) {
		if d.err != nil {
			fmt.Printf("delivery %d: error: %v\n", d.attempt, d.err)
			return
		}
		replayed := ""
		if d.replayed != "" {
			replayed = "  Idempotent-Replayed: " + d.replayed
		}
		fmt.Printf("delivery %d: HTTP %d%s\n    %s\n", d.attempt, d.status, replayed, d.body)
	}

	fmt.Printf("webhook event %s, delivered 3 times through %s\n\n", *event, *gateway)
	// Deliveries 1 and 2 race each other; 3 is the provider's later retry.
	var wg sync.WaitGroup
	results := make([]delivery, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = deliver(client, *gateway, *event, i+1)
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	for _, d := range results {
		print(d)
	}
	time.Sleep(500 * time.Millisecond)
	print(deliver(client, *gateway, *event, 3))

	resp, err := client.Get(*upstream + "/stats")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading CRM stats:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	var stats struct {
		DealsCreated int `json:"deals_created"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		fmt.Fprintln(os.Stderr, "reading CRM stats:", err)
		os.Exit(1)
	}
	fmt.Printf("\ndelivery attempts: 3\ndeals created in the CRM: %d\n", stats.DealsCreated)

	if err := actTwo(client, *gateway, *upstream, *event+"_dropped"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// waitReady polls the given URLs until each answers at all, for at most 15 s.
func waitReady(client *http.Client, urls ...string) error {
	deadline := time.Now().Add(15 * time.Second)
	for _, u := range urls {
		for {
			resp, err := client.Get(u)
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is not answering: %v", u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
