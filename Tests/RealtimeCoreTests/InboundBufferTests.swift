import RealtimeTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
@_spi(RealtimeEngine) import RealtimeCore
import Testing

@Suite(.timeLimit(.minutes(1))) struct InboundBufferTests {
    /// A consumer that waits gets everything one yield carried in one wake-up.
    @Test func aWaitingConsumerGetsTheWholeBatch() async throws {
        let buffer = InboundBuffer<Int>(limit: 100)
        let consumer = Task { try await buffer.nextBatch() }
        try await waitUntil { buffer.hasWaitingConsumer }
        #expect(buffer.yield(contentsOf: Array(0..<50)))
        #expect(try await consumer.value == Array(0..<50))
    }

    /// Yields while nobody waits accumulate; the next take gets them all at once.
    @Test func accumulatedYieldsAreTakenTogether() async throws {
        let buffer = InboundBuffer<Int>(limit: 100)
        buffer.yield(1)
        buffer.yield(contentsOf: [2, 3])
        #expect(try await buffer.nextBatch() == [1, 2, 3])
    }

    /// A batch handed over whole becomes the buffer's contents when nothing waits there, and is
    /// added after what waits otherwise; both keep the order, and the limit still pauses.
    @Test func batchesHandedOverWholeKeepTheOrder() async throws {
        let buffer = InboundBuffer<Int>(limit: 4)
        #expect(buffer.yield(batch: [1, 2]))
        #expect(!buffer.yield(batch: [3, 4, 5]), "five wait: the producer must pause")
        #expect(buffer.yield(batch: []) == false, "an empty batch tells the pause")
        #expect(try await buffer.nextBatch() == [1, 2, 3, 4, 5])
        let consumer = Task { try await buffer.nextBatch() }
        try await waitUntil { buffer.hasWaitingConsumer }
        #expect(buffer.yield(batch: [6, 7]))
        #expect(try await consumer.value == [6, 7])
    }

    /// At the limit the producer is told to pause; it is told to go on once the consumer has taken
    /// what waited, exactly once.
    @Test func theLimitPausesTheProducerUntilTheConsumerTakes() async throws {
        let buffer = InboundBuffer<Int>(limit: 4)
        let demands = NIOLockedValueBox(0)
        buffer.setOnDemand { demands.withLockedValue { $0 += 1 } }
        #expect(buffer.yield(contentsOf: [1, 2]))
        #expect(!buffer.yield(contentsOf: [3, 4, 5]), "five wait: the producer must pause")
        #expect(buffer.isPaused)
        #expect(demands.withLockedValue { $0 } == 0)
        #expect(try await buffer.nextBatch() == [1, 2, 3, 4, 5])
        #expect(demands.withLockedValue { $0 } == 1)
        #expect(!buffer.isPaused)
        #expect(buffer.yield(6))
        #expect(try await buffer.nextBatch() == [6])
        #expect(demands.withLockedValue { $0 } == 1, "no pause, no demand")
    }

    @Test func theErrorComesAfterTheElements() async throws {
        let buffer = InboundBuffer<Int>(limit: 10)
        buffer.yield(contentsOf: [1, 2])
        buffer.finish(throwing: TestError())
        buffer.yield(3)
        var iterator = InboundBuffer.Iterator(buffer)
        #expect(try await iterator.next() == 1)
        #expect(try await iterator.next() == 2)
        await #expect(throws: TestError.self) { try await iterator.next() }
        #expect(try await iterator.next() == nil)
    }

    @Test func aWaitingConsumerIsWokenByTheEnd() async throws {
        let buffer = InboundBuffer<Int>(limit: 10)
        let consumer = Task { try await buffer.nextBatch() }
        try await waitUntil { buffer.hasWaitingConsumer }
        buffer.finish()
        #expect(try await consumer.value == nil)
    }

    @Test func cancellingTheConsumerThrows() async throws {
        let buffer = InboundBuffer<Int>(limit: 10)
        let consumer = Task { try await buffer.nextBatch() }
        try await waitUntil { buffer.hasWaitingConsumer }
        consumer.cancel()
        await #expect(throws: CancellationError.self) { try await consumer.value }
    }

    /// The iterator walks a batch locally and takes the next one when it is done.
    @Test func theIteratorWalksBatchesInOrder() async throws {
        let buffer = InboundBuffer<Int>(limit: 1000)
        let (demand, more) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        buffer.setOnDemand { more.yield() }
        let producer = Task {
            var demands = demand.makeAsyncIterator()
            var pauses = 0
            for start in stride(from: 0, to: 10_000, by: 100) {
                if !buffer.yield(contentsOf: Array(start..<(start + 100))) {
                    pauses += 1
                    await demands.next()
                }
            }
            buffer.finish()
            return pauses
        }
        var iterator = InboundBuffer.Iterator(buffer)
        var seen: [Int] = []
        while let value = try await iterator.next() { seen.append(value) }
        _ = await producer.value
        #expect(seen == Array(0..<10_000))
    }
}

struct TestError: Error {}

/// Consumers on demand (`setConsumerStarter`): a quiet buffer holds no waiting consumer; elements
/// start one, which takes until nothing waits and ends; never two at once; order kept.
@Suite struct InboundBufferOnDemandTests {
    @Test func elementsStartAConsumerThatEndsWhenNothingWaits() async throws {
        let buffer = InboundBuffer<Int>(limit: 100)
        let starts = NIOLockedValueBox(0)
        let taken = NIOLockedValueBox<[Int]>([])
        buffer.setConsumerStarter {
            starts.withLockedValue { $0 += 1 }
            while let batch = buffer.takeOrPark() { taken.withLockedValue { $0 += batch } }
        }
        #expect(starts.withLockedValue { $0 } == 0, "nothing waits: no consumer")
        buffer.yield(contentsOf: [1, 2])
        #expect(starts.withLockedValue { $0 } == 1)
        #expect(taken.withLockedValue { $0 } == [1, 2])
        buffer.yield(3)
        #expect(starts.withLockedValue { $0 } == 2, "the first consumer ended: the next element starts another")
        #expect(taken.withLockedValue { $0 } == [1, 2, 3])
    }

    @Test func aRunningConsumerTakesWhatArrivesMeanwhileAndNoSecondOneStarts() async throws {
        let buffer = InboundBuffer<Int>(limit: 100)
        let starts = NIOLockedValueBox(0)
        let taken = NIOLockedValueBox<[Int]>([])
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let (proceed, proceedContinuation) = AsyncStream<Void>.makeStream()
        let consumers = NIOLockedValueBox<[Task<Void, Never>]>([])
        buffer.setConsumerStarter {
            starts.withLockedValue { $0 += 1 }
            let task = Task {
                startedContinuation.yield()
                for await _ in proceed { break }
                while let batch = buffer.takeOrPark() { taken.withLockedValue { $0 += batch } }
            }
            consumers.withLockedValue { $0.append(task) }
        }
        buffer.yield(1)
        for await _ in started { break }
        // The consumer runs (it has not taken yet): these wait for it, no second consumer starts.
        buffer.yield(2)
        buffer.yield(contentsOf: [3, 4])
        #expect(starts.withLockedValue { $0 } == 1)
        proceedContinuation.yield()
        for task in consumers.withLockedValue({ $0 }) { await task.value }
        #expect(taken.withLockedValue { $0 } == [1, 2, 3, 4])
        #expect(starts.withLockedValue { $0 } == 1)
    }

    @Test func aFullBufferPausesTheProducerUntilTheConsumerTakes() async throws {
        let buffer = InboundBuffer<Int>(limit: 2)
        let demanded = NIOLockedValueBox(0)
        buffer.setOnDemand { demanded.withLockedValue { $0 += 1 } }
        let pending = NIOLockedValueBox(false)
        // A starter that does not take at once: the elements pile up.
        buffer.setConsumerStarter { pending.withLockedValue { $0 = true } }
        #expect(buffer.yield(1))
        #expect(!buffer.yield(2), "the limit is reached: the producer pauses")
        #expect(pending.withLockedValue { $0 })
        #expect(buffer.takeOrPark() == [1, 2])
        #expect(demanded.withLockedValue { $0 } == 1, "taking the paused batch asks the producer for more")
        #expect(buffer.takeOrPark() == nil)
    }

    /// Dropping overflow: the producer is never paused; past the limit the oldest (or the newest)
    /// go, and droppedCount counts exactly those.
    @Test(arguments: [InboundBuffer<Int>.Overflow.dropOldest, .dropNewest])
    func droppingOverflowKeepsTheLimitAndCounts(_ overflow: InboundBuffer<Int>.Overflow) async throws {
        let buffer = InboundBuffer<Int>(limit: 10, overflow: overflow)
        for value in 1...95 { #expect(buffer.yield(value), "a dropping buffer never pauses its producer") }
        #expect(buffer.yield(contentsOf: Array(96...100)))
        #expect(buffer.droppedCount == 90)
        #expect(try await buffer.nextBatch() == (overflow == .dropOldest ? Array(91...100) : Array(1...10)))
        #expect(buffer.droppedCount == 90)
        buffer.yield(101)
        #expect(try await buffer.nextBatch() == [101])
        #expect(buffer.droppedCount == 90)
    }

    /// One event-loop job that appends element by element (a reader handling one read's frames)
    /// wakes a waiting consumer once, after the job: the hand-over counter says 1, not 500.
    @Test func appendsInOneEventLoopJobWakeTheConsumerOnce() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let buffer = InboundBuffer<Int>(limit: 1_000, overflow: .dropOldest)
        let consumer = Task {
            var seen: [Int] = []
            var iterator = InboundBuffer.Iterator(buffer)
            while seen.count < 500, let value = try await iterator.next() { seen.append(value) }
            return seen
        }
        try await waitUntil { buffer.hasWaitingConsumer }
        try await group.next().submit { for value in 0..<500 { buffer.append(value) } }.get()
        #expect(try await consumer.value == Array(0..<500))
        #expect(buffer.consumerWakeUps == 1)
    }
}
