import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// SocketIOGuide.md, performance: the events a connection read brings reach an event sequence's
/// loop in one hand-over. A server writes 1,000 events as 1,000 WebSocket frames (one write each,
/// as real servers do) while the network holds them back; let through, they arrive in a few reads.
/// A loop that keeps up is resumed once per read: counted in the pipeline (the sequence's
/// hand-overs), not timed. Resumed once per event, the count would be 1,000.
@Suite(.timeLimit(.minutes(2)))
struct SocketIOEventHandOverTests {
    @Test("a read's events reach an events loop in one hand-over", arguments: [false, true])
    func oneHandOverPerRead(named: Bool) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let manager = SocketManager(url: proxy.url(), configuration: .testing([.websocket], upgrade: false))
        let socket = manager.defaultSocket
        let events = named ? socket.events(named: "tick", bufferSize: 2_000) : socket.events(bufferSize: 2_000)
        try await socket.connect(timeout: .seconds(30))
        let total = 1_000
        let loop = Task {
            var seen: [Int] = []
            for await event in events where event.name == "tick" {
                seen.append(event.arguments.first?.intValue ?? -1)
                if seen.count == total { break }
            }
            return seen
        }
        proxy.inject(.stall(.targetToClient, for: nil))
        let written = server.webSocketPacketsWritten
        for index in 1...total { server.broadcast("tick", [.integer(Int64(index))]) }
        try await waitUntil("the server wrote every event", limit: .seconds(30)) { server.webSocketPacketsWritten >= written + total }
        let before = events.consumerWakeUps
        proxy.resume()
        let seen = await loop.value
        #expect(seen == Array(1...total), "every event, in order")
        let handOvers = events.consumerWakeUps - before
        #expect(handOvers >= 1)
        #expect(handOvers <= total / 10, "\(handOvers) hand-overs for \(total) events")
        #expect(events.droppedCount == 0)
        manager.disconnect()
        await manager.waitUntilStopped()
    }

    /// SocketIOGuide.md: when the buffer is full the overflow policy decides which event goes, and
    /// droppedCount counts them; the reading never waits for the loop.
    @Test("a loop that does not read: the overflow policy keeps the oldest or the newest, and counts the rest",
          arguments: [SocketIOEventStream.Overflow.dropOldest, .dropNewest])
    func overflow(policy: SocketIOEventStream.Overflow) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket], upgrade: false))
        let socket = manager.defaultSocket
        let events = socket.events(named: "tick", bufferSize: 10, overflow: policy)
        let seen = Recorder<Int>()
        socket.on("tick") { seen.append($0.arguments.first?.intValue ?? -1) }
        try await socket.connect(timeout: .seconds(30))
        for index in 1...100 { server.broadcast("tick", [.integer(Int64(index))]) }
        _ = try await seen.wait(count: 100, within: 30)
        manager.disconnect()
        var kept: [Int] = []
        for await event in events { kept.append(event.arguments.first?.intValue ?? -1) }
        #expect(kept == (policy == .dropOldest ? Array(91...100) : Array(1...10)))
        #expect(events.droppedCount == 90)
        await manager.waitUntilStopped()
    }
}
