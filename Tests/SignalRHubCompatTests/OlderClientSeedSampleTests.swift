import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRClient  // the sample's code had `import SwiftSignalRClient`; nothing else changes
import Testing

// The samples of ../shared/seeds/signalr-swift-client-beyond-basics.en.txt (the older
// SwiftSignalRClient), with only the import changed, run against SignalRTestServer.

/// The older client's delegate, as its post describes it.
final class LifecycleDelegate: HubConnectionDelegate, @unchecked Sendable {
    let events = Recorder<String>()
    func connectionDidOpen(hubConnection: HubConnection) { events.append("open") }
    func connectionDidFailToOpen(error: any Error) { events.append("failToOpen") }
    func connectionDidClose(error: (any Error)?) { events.append("close \(error == nil ? "nil" : "error")") }
}

/// The older client's samples call start() and stop() from synchronous code (a view controller);
/// in an async context Swift picks the async overloads instead.
func viewDidLoad(_ body: () -> Void) { body() }

@Suite("The older client's samples compile and behave as documented", .serialized, .timeLimit(.minutes(3)))
struct OlderClientSeedSampleTests {
    @Test("The older client: delegate, HttpConnectionOptions, callback invoke/send, ArgumentExtractor")
    func beyondBasics() async throws {
        var serverOptions = SignalRTestServer.Options()
        serverOptions.requiredToken = "token-from-provider"
        let server = try await SignalRTestServer.start(options: serverOptions)
        defer { Task { await server.stop() } }
        server.method("Add") { call in .number((call.arguments[0].doubleValue ?? 0) + (call.arguments[1].doubleValue ?? 0)) }
        server.method("SendAll") { [weak server] call in
            await server?.broadcast("AddMessage", call.arguments)
            return nil
        }

        let delegate = LifecycleDelegate()
        // The tests' own serial queue: swift test does not run the main queue on Linux.
        let queue = DispatchQueue(label: "callbacks")
        let hubConnection = HubConnectionBuilder(url: URL(string: server.url)!)
            .withLogging(minLogLevel: .warning)
            .withHubConnectionOptions(configureHubConnectionOptions: { $0.callbackQueue = queue })
            .withHubConnectionDelegate(delegate: delegate)
            .withHttpConnectionOptions(configureHttpOptions: { httpConnectionOptions in
                httpConnectionOptions.accessTokenProvider = { "token-from-provider" }
                httpConnectionOptions.headers = ["mycustomheader": "mycustomheadervalue"]
            })
            .build()
        let messages = Recorder<String>()
        hubConnection.on(method: "AddMessage", callback: { argumentExtractor in
            let user = try argumentExtractor.getArgument(type: String.self)
            var message = ""
            if argumentExtractor.hasMoreArgs() {
                message = try argumentExtractor.getArgument(type: String.self)
            }
            messages.append(">>> \(user): \(message)")
        })
        viewDidLoad { hubConnection.start() }
        #expect(try await delegate.events.wait(count: 1) == ["open"])

        let result = Recorder<String>()
        hubConnection.invoke(method: "Add", arguments: [2, 3], resultType: Int.self) { result_, error in
            if let error = error {
                result.append("error: \(error)")
            } else {
                result.append("Add result: \(result_!)")
            }
        }
        #expect(try await result.wait(count: 1) == ["Add result: 5"])

        let sent = Recorder<String>()
        hubConnection.send(method: "SendAll", "user", "with a message", sendDidComplete: { error in sent.append(error == nil ? "sent" : "\(error!)") })
        hubConnection.send(method: "SendAll", "only a user", sendDidComplete: { error in sent.append(error == nil ? "sent" : "\(error!)") })
        #expect(try await sent.wait(count: 2) == ["sent", "sent"])
        #expect(Set(try await messages.wait(count: 2)) == [">>> user: with a message", ">>> only a user: "])

        viewDidLoad { hubConnection.stop() }
        #expect(try await delegate.events.wait(count: 2) == ["open", "close nil"])

        // A start that fails reaches connectionDidFailToOpen (and not connectionDidClose).
        let failing = LifecycleDelegate()
        let refused = HubConnectionBuilder(url: URL(string: server.url)!).withHubConnectionDelegate(delegate: failing)
            .withHubConnectionOptions(configureHubConnectionOptions: { $0.callbackQueue = queue }).build()
        viewDidLoad { refused.start() }
        #expect(try await failing.events.wait(count: 1) == ["failToOpen"])

        // skipNegotiation goes straight to the WebSocket.
        let before = server.negotiateCount
        let direct = HubConnectionBuilder(url: URL(string: server.url)!)
            .withHttpConnectionOptions(configureHttpOptions: { options in
                options.skipNegotiation = true
                options.accessTokenProvider = { "token-from-provider" }
            })
            .build()
        try await direct.start()
        #expect(server.negotiateCount == before)
        await direct.stop()
    }
}
