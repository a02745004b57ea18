package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// actTwo is the articles' own example: the CRM creates deal D-9021, and
// its answer never comes back (it drops the connection). The provider
// retries; the gateway, instead of holding the event for a person or
// creating a second deal, asks the CRM for the deals made with the
// event's key, finds the one, and replays it. One deal for the event.
func actTwo(client *http.Client, gateway, crm, event string) error {
	fmt.Printf("\nact two: webhook event %s; the CRM creates the deal, then drops the connection before it answers\n\n", event)
	first, err := deliverEvent(client, gateway, event, 1, true)
	if err != nil {
		return err
	}
	if first.body == "" {
		first.body = "(empty body)"
	}
	fmt.Printf("delivery 1: HTTP %d (no answer from the CRM)\n    %s\n", first.status, first.body)
	time.Sleep(500 * time.Millisecond) // the provider retries
	second, err := deliverEvent(client, gateway, event, 2, false)
	if err != nil {
		return err
	}
	replayed := ""
	if second.replayed != "" {
		replayed = "  Idempotent-Replayed: " + second.replayed
	}
	fmt.Printf("delivery 2: HTTP %d%s (the gateway looked the deal up by the event's key)\n    %s\n", second.status, replayed, second.body)

	deals, err := dealsFor(client, crm, event)
	if err != nil {
		return fmt.Errorf("asking the CRM for the event's deals: %w", err)
	}
	ids := make([]string, len(deals))
	for i, d := range deals {
		ids[i] = d.ID
	}
	fmt.Printf("\ndelivery attempts: 2\ndeals in the CRM for event %s: %d (%s)\n", event, len(deals), strings.Join(ids, ", "))
	// The retry gets the deal as the create endpoint answers it: the deal
	// object with 201, not the search result around it.
	var got struct {
		ID        string `json:"id"`
		SourceKey string `json:"source_key"`
	}
	switch {
	case len(deals) != 1:
		return fmt.Errorf("event %s made %d deals, want 1", event, len(deals))
	case second.status != http.StatusCreated || second.replayed != "true" ||
		json.Unmarshal([]byte(second.body), &got) != nil || got.ID != deals[0].ID || got.SourceKey != event:
		return fmt.Errorf("the retry got %d %s, want the replay of deal %s (the deal object, 201)", second.status, second.body, deals[0].ID)
	}
	return nil
}

type eventAnswer struct {
	status   int
	replayed string
	body     string
}

// deliverEvent posts the webhook event through the gateway; drop asks
// the CRM to create the deal and drop the connection.
func deliverEvent(client *http.Client, gateway, event string, attempt int, drop bool) (eventAnswer, error) {
	payload, _ := json.Marshal(map[string]any{
		"id":               event,
		"type":             "deal.create",
		"delivery_attempt": attempt,
		"data":             map[string]any{"title": "Globex expansion", "amount": 9900, "currency": "EUR"},
	})
	req, err := http.NewRequest(http.MethodPost, gateway+"/crm/deals", bytes.NewReader(payload))
	if err != nil {
		return eventAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer demo-provider")
	if drop {
		req.Header.Set("X-Demo-Drop", "1")
	}
	resp, err := client.Do(req)
	if err != nil {
		return eventAnswer{}, fmt.Errorf("delivery %d: %w", attempt, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return eventAnswer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(bytes.TrimSpace(body))}, nil
}

// dealsFor asks the CRM itself for the deals made with key.
func dealsFor(client *http.Client, crm, key string) ([]struct {
	ID string `json:"id"`
}, error) {
	resp, err := client.Get(crm + "/crm/deals?source_key=" + url.QueryEscape(key))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /crm/deals: %s", resp.Status)
	}
	var deals []struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&deals); err != nil {
		return nil, err
	}
	return deals, nil
}
