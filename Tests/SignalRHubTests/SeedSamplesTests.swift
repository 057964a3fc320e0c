import Foundation
import NIOConcurrencyHelpers
import RealtimeTesting
import SignalRHub
import Testing

// The samples of ../shared/seeds/signalr-swift-client-guide.de.txt (dotnet/signalr-client-swift's
// documentation), with only the import changed, run against SignalRTestServer with the hub methods
// they name. The older SwiftSignalRClient's samples are in SignalRHubCompatTests.

/// The guide's custom retry policy, verbatim.
struct CustomRetryPolicy: RetryPolicy {
    func nextRetryInterval(retryContext: RetryContext) -> TimeInterval? {
        // For example, retry every 1 second indefinitely.
        return 1
    }
}

@Suite("Seed samples compile and behave as documented", .serialized, .timeLimit(.minutes(3)))
struct SeedSamplesTests {
    /// A server with the guide's hub: SendMessage broadcasts ReceiveMessage, StreamMethod streams,
    /// TriggerClientResult asks the caller's ClientResult handler.
    static func chatServer() async throws -> SignalRTestServer {
        let server = try await SignalRTestServer.start()
        server.method("SendMessage") { [weak server] call in
            await server?.broadcast("ReceiveMessage", call.arguments)
            return nil
        }
        server.stream("StreamMethod") { _ in
            AsyncThrowingStream { continuation in
                for word in ["eins", "zwei", "drei"] { continuation.yield(.string(word)) }
                continuation.finish()
            }
        }
        server.method("TriggerClientResult", concurrent: true) { [weak server] call in
            try await server?.invokeClient(call.connectionId, "ClientResult", ["from the hub"]) ?? .null
        }
        server.method("Add") { call in .number((call.arguments[0].doubleValue ?? 0) + (call.arguments[1].doubleValue ?? 0)) }
        return server
    }

    @Test("The guide: builder, on, invoke, send, stream, client results, reconnect callbacks")
    func guide() async throws {
        let server = try await Self.chatServer()
        defer { Task { await server.stop() } }
        let url = server.url
        let said = Recorder<String>()

        let connection = HubConnectionBuilder()
            .withUrl(url: url)
            .build()

        // The guide writes `await connection.on(...)`: its HubConnection is an actor. Here `on` is
        // synchronous, so that `await` compiles with a "no 'async' operations" warning; it is left
        // out to keep the build free of warnings (the SignalR guide says so).
        connection.on("ReceiveMessage") { (user: String, message: String) in
            print("\(user) says: \(message)")
            said.append("\(user) says: \(message)")
        }

        connection.on("ClientResult") { (message: String) in
            return "client response"
        }

        try await connection.start()

        // Using invoke, which waits for a response
        try await connection.invoke(method: "SendMessage", arguments: "myUser", "Hello")
        // Using send, which does not wait for a response
        try await connection.send(method: "SendMessage", arguments: "myUser", "Hello")
        #expect(try await said.wait(count: 2) == ["myUser says: Hello", "myUser says: Hello"])

        let streamResult: any StreamResult<String> = try await connection.stream(method: "StreamMethod")
        var items: [String] = []
        for try await item in streamResult.stream {
            print("Received item: \(item)")
            items.append(item)
        }
        #expect(items == ["eins", "zwei", "drei"])

        let answer: String = try await connection.invoke(method: "TriggerClientResult")
        #expect(answer == "client response")
        await connection.stop()
    }

    @Test("The guide: the builder's options all compile and take effect")
    func guideOptions() async throws {
        let server = try await Self.chatServer()
        defer { Task { await server.stop() } }
        let url = server.url

        let reconnecting = HubConnectionBuilder()
            .withUrl(url: url)
            .withAutomaticReconnect()
            .build()
        #expect((reconnecting.options.retryPolicy as? DefaultRetryPolicy)?.retryDelays == [0, 2, 10, 30])

        let arrayPolicy = HubConnectionBuilder()
            .withUrl(url: url)
            .withAutomaticReconnect([0, 0, 1]) // Wait 0, 0, and 1 second before each reconnect attempt; stop after 3 attempts.
            .build()
        #expect((arrayPolicy.options.retryPolicy as? DefaultRetryPolicy)?.retryDelays == [0, 0, 1])

        let custom = HubConnectionBuilder()
            .withUrl(url: url)
            .withAutomaticReconnect(CustomRetryPolicy())
            .build()
        #expect(custom.options.retryPolicy is CustomRetryPolicy)

        let webSocketsOnly = HubConnectionBuilder()
            .withUrl(url: url, transport: .webSockets) // use websocket only
            .build()
        #expect(webSocketsOnly.options.transports == .webSockets)

        let twoTransports = HubConnectionBuilder()
            .withUrl(url: url, transport: [.webSockets, .serverSentEvents]) // use websockets and server sent events
            .build()
        #expect(twoTransports.options.transports == [.webSockets, .serverSentEvents])

        let tuned = HubConnectionBuilder()
            .withUrl(url: url)
            .withLogLevel(logLevel: .debug)
            .withKeepAliveInterval(keepAliveInterval: 10)
            .withServerTimeout(serverTimeout: 40)
            .withHubProtocol(hubProtocol: .messagePack)
            .build()
        #expect(tuned.options.keepAliveInterval == .seconds(10))
        #expect(tuned.options.serverTimeout == .seconds(40))
        #expect(tuned.options.hubProtocol == .messagePack)
        try await tuned.start()
        let sum: Int = try await tuned.invoke(method: "Add", arguments: 1, 2)
        #expect(sum == 3)
        await tuned.stop()

        // Reconnect callbacks, as the guide registers them, fire on a server-initiated drop.
        let events = Recorder<String>()
        let connection = HubConnectionBuilder().withUrl(url: url).withAutomaticReconnect([0, 0, 1]).build()
        connection.onReconnecting { error in
            // connection is disconnected because of error
            events.append("reconnecting")
        }
        connection.onReconnected {
            // connection is connected back
            events.append("reconnected")
        }
        try await connection.start()
        await server.dropAll()
        #expect(try await events.wait(count: 2) == ["reconnecting", "reconnected"])
        await connection.stop()
    }
}
