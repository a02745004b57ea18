package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

func (d delivery) print() {
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

// run delivers the event three times through gateway and reports how
// many deals the CRM created meanwhile; anything but one is an error.
func run(client *http.Client, gateway, crm, event string) error {
	before, _, err := getStats(client, crm)
	if err != nil {
		return fmt.Errorf("reading the CRM's stats: %w", err)
	}
	fmt.Printf("\nwebhook event %s, delivered 3 times through %s\n\n", event, gateway)
	// Deliveries 1 and 2 race each other; 3 is the provider's later retry.
	var wg sync.WaitGroup
	results := make([]delivery, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = deliver(client, gateway, event, i+1)
		}()
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	for _, d := range results {
		d.print()
	}
	time.Sleep(500 * time.Millisecond)
	deliver(client, gateway, event, 3).print()

	after, _, err := getStats(client, crm)
	if err != nil {
		return fmt.Errorf("reading the CRM's stats: %w", err)
	}
	created := after - before
	fmt.Printf("\ndelivery attempts: 3\ndeals created in the CRM: %d\n", created)
	if created != 1 {
		return fmt.Errorf("one event created %d deals, want 1", created)
	}
	return nil
}
