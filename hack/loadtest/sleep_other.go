//go:build !linux

package main

import "time"

// sleepPrecisely sleeps for d. Outside Linux it is time.Sleep, which may
// oversleep by a millisecond or more: check the send lag loadtest reports.
func sleepPrecisely(d time.Duration) {
	time.Sleep(d)
}
