import Foundation
import NIOConcurrencyHelpers
import NIOCore
@_spi(RealtimeEngine) @testable import RealtimeCore
import RealtimeTesting
import Testing

/// The WebSocket keep-alive (`WebSocketConfiguration.autoPing`): its rule as a value, then on real
/// sockets through FaultProxy with the runtime's timers on a manual clock, one interval at a time.
@Suite(.timeLimit(.minutes(2))) struct WebSocketKeepAliveTests {
    typealias Action = WebSocketKeepAliveRule.Action

    /// Each step is an input; ticks say what the rule does at the end of an interval.
    enum Step { case received, tick(reading: Bool, expect: Action), resumed }

    @Test(arguments: [
        // A busy connection sends no ping.
        ("busy", [Step.received, .tick(reading: true, expect: .none), .received, .tick(reading: true, expect: .none)]),
        // A quiet connection pings after a silent interval; the pong clears it.
        ("quiet, answered", [.tick(reading: true, expect: .none), .tick(reading: true, expect: .sendPing), .received,
                             .tick(reading: true, expect: .none), .tick(reading: true, expect: .sendPing)]),
        // No answer within the next interval: close (the third interval of silence).
        ("silent peer", [.tick(reading: true, expect: .none), .tick(reading: true, expect: .sendPing), .tick(reading: true, expect: .close)]),
        // While the consumer holds the reading, silence proves nothing: no ping, no close.
        ("paused reading", [.tick(reading: true, expect: .none), .tick(reading: false, expect: .none), .tick(reading: false, expect: .none),
                            .tick(reading: false, expect: .none)]),
        // A ping out when reading paused: resuming gives the answer an interval to be read.
        ("ping out, then paused", [.tick(reading: true, expect: .none), .tick(reading: true, expect: .sendPing), .tick(reading: false, expect: .none),
                                   .resumed, .tick(reading: true, expect: .none), .tick(reading: true, expect: .close)]),
    ])
    func rule(_ name: String, _ steps: [Step]) {
        var rule = WebSocketKeepAliveRule()
        for (index, step) in steps.enumerated() {
            switch step {
            case .received: rule.received()
            case .resumed: rule.readingResumed()
            case .tick(let reading, let expected):
                let action = rule.tick(reading: reading)
                #expect(action == expected, "\(name), step \(index)")
            }
        }
    }

    /// Moves the manual clock to the keep-alive's next deadline and waits until it ran (re-armed,
    /// or the connection ended); returns false once the connection ended.
    func nextInterval(_ clock: ManualClock, _ timers: TimerQueue, ended: @escaping @Sendable () -> Bool) async throws -> Bool {
        guard let deadline = timers.nextDeadline else { return !ended() }
        clock.advance(by: deadline - timers.now)
        try await waitUntil("the keep-alive ran (deadline \(deadline), now \(timers.now), next \(String(describing: timers.nextDeadline)), pending \(timers.pendingCount))") { ended() || (timers.nextDeadline ?? .zero) > deadline }
        return !ended()
    }

    /// A peer that stalls (no FIN, no RST) is found on the third interval of silence, with a
    /// `timeout` error; nothing but the keep-alive could have noticed. Also when the peer never
    /// sent a frame after the upgrade (the read outstanding then was issued before the keep-alive
    /// joined the channel).
    @Test(arguments: [true, false])
    func aSilentPeerIsFoundInThreeIntervals(exchangeFirst: Bool) async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let clock = ManualClock()
        let runtime = RealtimeRuntime(clock: clock)
        let open = NIOLockedValueBox(false)
        let ended = NIOLockedValueBox(false)
        let connection = Task {
            defer { ended.withLockedValue { $0 = true } }
            try await WebSocketTransport.connect(
                to: proxy.url(scheme: "ws") + "/", configuration: WebSocketConfiguration(autoPing: .seconds(10)), runtime: runtime
            ) { connection in
                var messages = connection.inbound.makeAsyncIterator()
                if exchangeFirst {
                    try await connection.send(text: "hello")
                    _ = try await messages.next()
                }
                open.withLockedValue { $0 = true }
                while try await messages.next() != nil {}
            }
        }
        try await waitUntil("open, echo received") { open.withLockedValue { $0 } }
        proxy.inject(.stall(.both, for: nil))
        var intervals = 0
        while try await nextInterval(clock, runtime.timers, ended: { ended.withLockedValue { $0 } }) {
            intervals += 1
            if intervals > 5 { break }
        }
        let error = await #expect(throws: RealtimeError.self) { try await connection.value }
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(intervals == 2, "closed at the third interval, after \(intervals) passed")
    }

    /// A live peer answers the pings: many quiet intervals later the connection is open and works.
    /// (The answer to a ping travels in real time: each interval waits for it before the clock moves.)
    @Test func aQuietLivePeerStaysConnected() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let runtime = RealtimeRuntime(clock: clock)
        let (step, stepper) = AsyncStream<Void>.makeStream()
        let replies = Recorder<String>()
        let ended = NIOLockedValueBox(false)
        let opened = NIOLockedValueBox<WebSocketConnection?>(nil)
        let connection = Task {
            defer { ended.withLockedValue { $0 = true } }
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(server.port)/", configuration: WebSocketConfiguration(autoPing: .seconds(10)), runtime: runtime
            ) { connection in
                opened.withLockedValue { $0 = connection }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await message in connection.inbound { if case .text(let text) = message { replies.append(text) } }
                    }
                    for await _ in step { try await connection.send(text: "still there") }
                    try await connection.close()
                    try await group.waitForAll()
                }
            }
        }
        stepper.yield()
        _ = try await replies.wait(count: 1)
        let socket = try #require(opened.withLockedValue { $0 })
        for _ in 0..<10 {
            #expect(try await nextInterval(clock, runtime.timers, ended: { ended.withLockedValue { $0 } }))
            try await waitUntil("the pong came back") { socket.keepAliveCounts.pongs == socket.keepAliveCounts.pings }
        }
        // Quiet intervals alternate: one that heard the last pong, then one that pings.
        #expect(socket.keepAliveCounts.pings == 5, "\(socket.keepAliveCounts)")
        stepper.yield()
        _ = try await replies.wait(count: 2)
        stepper.finish()
        try await connection.value
    }

    /// A consumer that stops reading while the peer keeps sending: the channel stops reading too,
    /// and however many intervals pass, the connection is not closed; everything arrives after.
    @Test func aConsumerThatStoppedReadingIsNotTakenForASilentPeer() async throws {
        let server = try await WebSocketEchoServer.start()
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let runtime = RealtimeRuntime(clock: clock)
        let (reading, startReading) = AsyncStream<Void>.makeStream()
        let count = 200
        let received = NIOLockedValueBox(0)
        let ended = NIOLockedValueBox(false)
        let inbound = NIOLockedValueBox<InboundBuffer<WebSocketInbound>?>(nil)
        let connection = Task {
            defer { ended.withLockedValue { $0 = true } }
            try await WebSocketTransport.connect(
                to: "ws://127.0.0.1:\(server.port)/", configuration: WebSocketConfiguration(autoPing: .seconds(10)), runtime: runtime
            ) { connection in
                if case .loop(let buffer) = connection.inbound.source { inbound.withLockedValue { $0 = buffer } }
                for _ in 0..<count { try await connection.send(text: "!send 65536") }
                for await _ in reading { break }
                for try await _ in connection.inbound {
                    let total = received.withLockedValue { $0 += 1; return $0 }
                    if total == count { return }
                }
            }
        }
        // 200 x 64 KiB is far more than the socket buffers and the channel's inbound buffer hold.
        // The clock moves only once the channel stopped reading for its consumer: before the
        // connection is open its next deadline is the connect timeout's (a loaded repeat run moved
        // past it and the connect failed), and while the echoes are still on their way an interval
        // of the manual clock can pass with the channel reading and nothing read yet.
        try await waitUntil("the channel stopped reading for its consumer") {
            inbound.withLockedValue { $0?.isPaused ?? false } || ended.withLockedValue { $0 }
        }
        for _ in 0..<6 {
            #expect(try await nextInterval(clock, runtime.timers, ended: { ended.withLockedValue { $0 } }))
        }
        startReading.yield()
        try await connection.value
        #expect(received.withLockedValue { $0 } == count)
    }
}
