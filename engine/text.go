package engine

import "fmt"

// plural is "1 noun" or "n nouns" (or, given, n and the plural form): the
// count in a message, with its noun agreeing.
func plural[N ~int | ~int64 | ~uint64 | ~uint32](n N, noun string, nouns ...string) string {
	if n == 1 {
		return "1 " + noun
	}
	if len(nouns) > 0 {
		return fmt.Sprintf("%d %s", n, nouns[0])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
