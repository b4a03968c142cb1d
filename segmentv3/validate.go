package analytics

// FieldGetter is a message held as a generic object, such as a decoded
// JSON map, that ValidateFields can check (v3.3.0).
type FieldGetter interface {
	// GetField returns the value of the JSON field named field ("type",
	// "userId", "event", …) and whether it is set.
	GetField(field string) (interface{}, bool)
}

// ValidateFields checks msg as the Validate method of its type would: the
// field "type" ("alias", "group", "identify", "page", "screen" or
// "track") picks the type, and the fields that type requires must be
// non-empty strings. It returns nil, or the FieldError that Validate
// would return. Without a known type it returns a FieldError for
// analytics.Event's Type with the type's value. From v3.3.0.
func ValidateFields(msg FieldGetter) error {
	typ, _ := msg.GetField("type")
	name, _ := typ.(string)
	switch name {
	case "alias":
		return Alias{UserId: stringField(msg, "userId"), PreviousId: stringField(msg, "previousId")}.Validate()
	case "group":
		return Group{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId"),
			GroupId: stringField(msg, "groupId")}.Validate()
	case "identify":
		return Identify{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "page":
		return Page{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "screen":
		return Screen{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId")}.Validate()
	case "track":
		return Track{UserId: stringField(msg, "userId"), AnonymousId: stringField(msg, "anonymousId"),
			Event: stringField(msg, "event")}.Validate()
	}
	return FieldError{Type: "analytics.Event", Name: "Type", Value: typ}
}

// stringField is msg's field as a string; "" when it is absent or not a
// string.
func stringField(msg FieldGetter, field string) string {
	v, _ := msg.GetField(field)
	s, _ := v.(string)
	return s
}
