import Foundation
import RealtimeCore
import RealtimeTesting
import SpreadbotClient
import Testing

/// SpreadbotGuide.md, performance: the messages one socket read brings reach a `messages()` loop
/// in one hand-over. The server writes 1,000 messages as 1,000 WebSocket frames, one write each;
/// the network holds them and lets them through together, so they arrive in a few reads. The count
/// is the pipeline's own (hand-overs to the loop), not a timing: one per message would be 1,000.
@Suite(.timeLimit(.minutes(2)))
struct SpreadbotHandOverTests {
    @Test("a read's messages reach the messages() loop in one hand-over")
    func oneHandOverPerRead() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        var configuration = spreadbotConfiguration(server, baseURL: proxy.url())
        configuration.messageBufferCapacity = 2_000
        let client = Spreadbot(configuration: configuration)
        let total = 1_000
        let iterator = client.messages().makeAsyncIterator()
        let counter = iterator  // a copy that shares the subscription: it reads the count
        client.establishConnection(path: "burst")
        try await waitUntil("connected over WebSocket", limit: .seconds(30)) { client.state == .connected }
        #expect(client.transport == .webSocket)
        let consumer = Task { [iterator] in
            var iterator = iterator
            var read: [String] = []
            while read.count < total + 1, let message = try await iterator.next() { read.append(message.data.string ?? "") }
            return read
        }
        // One message first: the loop has been handed something and waits before the burst. A
        // message already buffered when the loop asks is taken without a wait, so the loop is
        // waiting before each step (a loaded repeat run's consumer task started after "m0" came,
        // and no hand-over was counted).
        try await waitUntil("the loop waits", limit: .seconds(30)) { counter.isWaiting }
        server.publish("m0", to: "burst")
        try await waitUntil("the first message was handed over", limit: .seconds(30)) { counter.consumerWakeUps >= 1 }
        proxy.hold(.targetToClient)
        let written = server.webSocketMessagesWritten
        for index in 1...total { server.publish("m\(index)", to: "burst") }
        try await waitUntil("the server wrote every message and the proxy holds them", limit: .seconds(30)) {
            server.webSocketMessagesWritten >= written + total && proxy.statistics.bytesHeldForClients >= total * 10
        }
        try await waitUntil("the loop waits for the burst", limit: .seconds(30)) { counter.isWaiting }
        let before = counter.consumerWakeUps
        proxy.resume()
        #expect(try await consumer.value == (0...total).map { "m\($0)" })
        let handOvers = counter.consumerWakeUps - before
        #expect(handOvers >= 1)
        #expect(handOvers <= total / 10, "\(handOvers) hand-overs for \(total) messages")
        client.closeConnection()
    }
}
