// Command tailodds estimates, by Monte Carlo, how long Close waits for the
// last batches of a run when every attempt fails independently with
// probability p and every counted wait is d_1 (a uniform draw in [lo, hi]):
// batches leave at lambda per second until Close, drain more are still
// queued at Close and leave at drain-rate, each attempt takes rtt, and Close
// returns when the last batch is answered 2xx. It prints P(Close > tau), the
// chance that every one of five runs stays at or below tau, the
// distribution of Close and how often the batch answered last had failed m
// times. No SDK is involved: it is the arithmetic behind the paced and flat
// Close figures of the README.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
)

func main() {
	lambda := flag.Float64("lambda", 80, "batches per second before Close (20 000 ev/s at 250 events a batch)")
	p := flag.Float64("p", 0.2, "probability that an attempt fails")
	lo := flag.Float64("lo", 0.45, "shortest counted wait, s")
	hi := flag.Float64("hi", 0.55, "longest counted wait, s")
	rtt := flag.Float64("rtt", 0.002, "time of one attempt, s")
	drain := flag.Int("drain", 0, "batches still queued at Close")
	drainRate := flag.Float64("drain-rate", 500, "batches per second while the queue drains at Close")
	trials := flag.Int("trials", 100000, "simulated runs")
	tau := flag.Float64("tau", 1.0, "Close target, s")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()

	rng := rand.New(rand.NewPCG(*seed, 2))
	over, sum := 0, 0.0
	hist := make([]int, 12) // quarter seconds; the last bin holds the rest
	lastFails := map[int]int{}
	for range *trials {
		end, fails := 0.0, 0
		send := func(at float64) {
			m := 0
			for rng.Float64() < *p {
				m++
			}
			t := at + *rtt
			for range m {
				t += *lo + (*hi-*lo)*rng.Float64() + *rtt
			}
			if t > end {
				end, fails = t, m
			}
		}
		for j := range int(*lambda * 8) { // batches older than 8 s cannot matter
			send(-float64(j) / *lambda)
		}
		for j := range *drain {
			send(float64(j) / *drainRate)
		}
		if end > *tau {
			over++
		}
		sum += end
		hist[min(int(end/0.25), len(hist)-1)]++
		lastFails[fails]++
	}
	q := float64(over) / float64(*trials)
	fmt.Printf("lambda=%g/s p=%g waits [%g, %g] s rtt=%g s drain=%d: mean Close %.3f s; P(Close > %g s) = %.4f; P(5 of 5 <= %g s) = %.4f\n",
		*lambda, *p, *lo, *hi, *rtt, *drain, sum/float64(*trials), *tau, q, *tau, math.Pow(1-q, 5))
	for i, h := range hist {
		fmt.Printf("  Close in [%.2f, %.2f) s: %.4f\n", float64(i)*0.25, float64(i+1)*0.25, float64(h)/float64(*trials))
	}
	for m := range 12 {
		if lastFails[m] > 0 {
			fmt.Printf("  the batch answered last failed %d times: %.4f\n", m, float64(lastFails[m])/float64(*trials))
		}
	}
}
