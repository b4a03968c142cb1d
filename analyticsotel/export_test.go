package analyticsotel

// StatFields maps each analytics.Stats field that has an instrument to the
// instrument's name and, for analytics.events.rejected, its reason.
func StatFields() map[string][2]string {
	out := map[string][2]string{}
	for _, si := range statInstruments {
		out[si.field] = [2]string{si.name, si.reason}
	}
	return out
}
