// Values the dotnet/signalr-client-swift rows' checks work on.
func aConnection() -> HubConnection { fatalError() }
func aContext() -> RetryContext { fatalError() }
func aResponse() -> HttpResponse { fatalError() }
func aStream() -> any StreamResult<String> { fatalError() }
func anEncoder() -> Encoder { fatalError() }
func aDecoder() -> Decoder { fatalError() }
struct SampleRetryPolicy: RetryPolicy {
    func nextRetryInterval(retryContext: RetryContext) -> TimeInterval? { 1 }
}
