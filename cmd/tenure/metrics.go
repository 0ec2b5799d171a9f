package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// agentMetrics are the agent's own Prometheus metrics (the demo workload
// and the witness) and the registry they share with httpapi's tenure_*
// metrics and, through httpapi.BridgeGoMetrics, raft's and memberlist's.
type agentMetrics struct {
	reg *prometheus.Registry

	ticks          prometheus.Counter
	witnessSent    prometheus.Counter
	witnessDropped prometheus.Counter
	witnessErrors  prometheus.Counter
}

func newAgentMetrics() *agentMetrics {
	reg := prometheus.NewRegistry()
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tenure", Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	m := &agentMetrics{reg: reg}
	m.ticks = counter("workload_ticks_total", "Demo workload ticks (one per owned shard per tick).")
	m.witnessSent = counter("witness_ticks_sent_total", "Ticks delivered to the witness.")
	m.witnessDropped = counter("witness_ticks_dropped_total", "Ticks dropped because the witness could not keep up (buffer full or POST failed).")
	m.witnessErrors = counter("witness_post_errors_total", "Failed witness POSTs.")
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
