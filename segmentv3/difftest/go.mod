module github.com/relaykit/analytics-go/segmentv3/difftest

go 1.25

require (
	github.com/relaykit/analytics-go v0.0.0
	github.com/segmentio/analytics-go/v3 v3.3.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	gopkg.in/segmentio/analytics-go.v3 v3.1.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/golang-jwt/jwt/v5 v5.3.1 // indirect
	github.com/google/uuid v1.3.0 // indirect
	github.com/segmentio/backo-go v1.1.0 // indirect
	github.com/xtgo/uuid v0.0.0-20140804021211-a0b114877d4c // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/relaykit/analytics-go => ../..
