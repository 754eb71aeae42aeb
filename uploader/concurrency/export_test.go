package concurrency

// FirstWaiting is how many AcquireFirst callers wait on g (a *Controller
// or a *Fixed).
func FirstWaiting(g any) int {
	switch g := g.(type) {
	case *Controller:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.first
	case *Fixed:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.first
	}
	return 0
}

// Blocked is how many Acquire and AcquireFirst callers wait on g for a
// slot (a *Controller or a *Fixed).
func Blocked(g any) int {
	switch g := g.(type) {
	case *Controller:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.blocked
	case *Fixed:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.blocked
	}
	return 0
}
