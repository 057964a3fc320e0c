// Values the SwiftSignalRClient rows' checks work on.
func aConnection() -> HubConnection { fatalError() }
func aBuilder() -> HubConnectionBuilder { fatalError() }
func aHandle() -> StreamHandle { fatalError() }
func aContext() -> RetryContext { fatalError() }
func anExtractor() -> ArgumentExtractor { fatalError() }
func anHttpConnection() -> HttpConnection { fatalError() }
func aWebsocketsTransport() -> WebsocketsTransport { fatalError() }
func aLongPollingTransport() -> LongPollingTransport { fatalError() }
func aTransportDelegate() -> ConnectionTransportDelegate { fatalError() }
func aPayload() -> Data { fatalError() }
func anUpload() -> AsyncStream<Encodable> { fatalError() }
let hubURL = URL(string: "https://example.com/chat")!
final class SampleDelegate: HubConnectionDelegate {
    func connectionDidOpen(hubConnection: HubConnection) {}
    func connectionDidFailToOpen(error: Error) {}
    func connectionDidClose(error: Error?) {}
}
struct SampleUser: Codable { var name: String }
