import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeCore
import RealtimeTesting
import Testing

/// `InboundBuffer.push(into:retryingOn:_:)`: what a library hands out as an `AsyncThrowingStream`
/// fed where messages are read. Nothing is dropped when the stream's own buffer is full (the
/// refused element waits and is tried again), the producer is paused by the buffer's limit as with
/// any consumer, and the end, an error and a consumer that leaves all reach the other side.
@Suite(.timeLimit(.minutes(1))) struct InboundPushTests {
    let loop = MultiThreadedEventLoopGroup.singleton.next()

    @Test func everyElementArrivesInOrderThroughAFullStream() async throws {
        let buffer = InboundBuffer<Int>(limit: 4)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: String.self, bufferingPolicy: .bufferingOldest(4))
        buffer.push(into: continuation, retryingOn: loop) { String($0) }
        let paused = NIOLockedValueBox(0)
        buffer.setOnDemand { paused.withLockedValue { $0 += 1 } }
        // 100 elements in batches of 10, while nobody reads: the stream holds 4, the buffer the rest
        // up to its limit (the producer is told to pause), nothing is dropped.
        var refused = 0
        for start in stride(from: 0, to: 100, by: 10) where !buffer.yield(contentsOf: Array(start..<(start + 10))) { refused += 1 }
        #expect(refused > 0, "past the limit the producer is told to pause")
        buffer.finish()
        var seen: [String] = []
        for try await item in stream { seen.append(item) }
        #expect(seen == (0..<100).map(String.init), "every element, in order, none dropped")
    }

    @Test func theEndAndAnErrorReachTheStreamAfterTheElements() async throws {
        let buffer = InboundBuffer<Int>(limit: 8)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Int.self, bufferingPolicy: .bufferingOldest(8))
        buffer.push(into: continuation, retryingOn: loop) { $0 }
        buffer.yield(contentsOf: [1, 2, 3])
        buffer.finish(throwing: TestError())
        var seen: [Int] = []
        await #expect(throws: TestError.self) {
            for try await item in stream { seen.append(item) }
        }
        #expect(seen == [1, 2, 3])
    }

    @Test func aParkedPusherSeesTheEnd() async throws {
        let buffer = InboundBuffer<Int>(limit: 8)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Int.self, bufferingPolicy: .bufferingOldest(8))
        buffer.push(into: continuation, retryingOn: loop) { $0 }
        let reader = Task { try await stream.reduce(into: [Int]()) { $0.append($1) } }
        buffer.yield(1)
        // The pusher has handed 1 over and parked; the end alone must start it again.
        buffer.finish()
        #expect(try await reader.value == [1])
    }

    @Test func aTransformThatThrowsEndsTheStreamWithItsError() async throws {
        let buffer = InboundBuffer<Int>(limit: 8)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Int.self, bufferingPolicy: .bufferingOldest(8))
        buffer.push(into: continuation, retryingOn: loop) { value in
            if value == 3 { throw TestError() }
            return value
        }
        buffer.yield(contentsOf: [1, 2, 3, 4])
        var seen: [Int] = []
        await #expect(throws: TestError.self) {
            for try await item in stream { seen.append(item) }
        }
        #expect(seen == [1, 2])
    }

    @Test func aConsumerThatLeavesLetsGoOfWhatComesLater() async throws {
        let buffer = InboundBuffer<Int>(limit: 2)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Int.self, bufferingPolicy: .bufferingOldest(2))
        buffer.push(into: continuation, retryingOn: loop) { $0 }
        let reader = Task {
            var seen: [Int] = []
            for try await item in stream { seen.append(item) }
            return seen
        }
        #expect(buffer.yield(1))
        try await waitUntil("the pusher took the first element", limit: .seconds(10)) { buffer.bufferedCount == 0 }
        reader.cancel()
        #expect(try await reader.value.count <= 1)
        // The consumer left: every element that comes now is let go, and the producer is never held
        // (a stream nobody reads must not stop the connection's reading).
        for value in 2...50 { #expect(buffer.yield(value)) }
        try await waitUntil("nothing waits", limit: .seconds(10)) { buffer.bufferedCount == 0 }
        #expect(!buffer.isPaused)
    }
}
