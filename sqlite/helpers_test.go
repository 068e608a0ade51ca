package sqlite

import "context"

var ctxBG = context.Background()
