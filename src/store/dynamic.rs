//! [`Backend`] behind a pointer: its `impl Future` methods boxed, so
//! [`Store`](super::Store) holds any backend without a type parameter.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{
    Backend, Blocked, ClaimOutcome, ClaimRequest, Deleted, Due, Failure, Fleet, Health,
    Invalidations, Leased, ListQuery, Listing, Queue, Queued, Record, RecordState, Records,
    StoreError, StoreKey, Transfer,
};
use crate::order::Rules;
use crate::replay::RecordedResponse;

pub(super) type Op<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`Backend`] behind a pointer, so [`Store`] holds any backend without a
/// type parameter. One allocation per operation; next to a store round trip
/// it does not show (BENCHMARKS.md).
pub(super) trait DynBackend: Send + Sync {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>, token: &'a str) -> Op<'a, ClaimOutcome>;
    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        processing_ttl: Duration,
    ) -> Op<'a, bool>;
    fn complete<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        response: &'a RecordedResponse,
        retention: Duration,
    ) -> Op<'a, bool>;
    fn fail<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        failure: &'a Failure<'a>,
    ) -> Op<'a, Option<RecordState>>;
    fn release<'a>(&'a self, key: &'a StoreKey, token: &'a str) -> Op<'a, bool>;
    fn lease_due<'a>(
        &'a self,
        source: &'a str,
        tokens: &'a [String],
        processing_ttl: Duration,
    ) -> Op<'a, Vec<Due>>;
    fn lease_ordered<'a>(
        &'a self,
        source: &'a str,
        tokens: &'a [String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Op<'a, Leased>;
    fn list<'a>(&'a self, query: &'a ListQuery<'a>) -> Op<'a, Vec<(String, Record)>>;
    fn count<'a>(&'a self, source: &'a str, state: RecordState) -> Op<'a, u64>;
    fn queued<'a>(&'a self, source: &'a str) -> Op<'a, Queued>;
    fn trim<'a>(&'a self, source: &'a str, state: RecordState, before_ms: u64) -> Op<'a, u64>;
    fn oldest<'a>(&'a self, source: &'a str, state: RecordState) -> Op<'a, Option<u64>>;
    fn blocked<'a>(&'a self, source: &'a str, limit: usize) -> Op<'a, Vec<Blocked>>;
    fn get<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<Record>>;
    fn delete<'a>(&'a self, key: &'a StoreKey, force: bool) -> Op<'a, Deleted>;
    fn export<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<(Record, u64)>>;
    fn import<'a>(
        &'a self,
        key: &'a StoreKey,
        record: &'a Record,
        expires_at_ms: u64,
        guard: Option<&'a StoreKey>,
    ) -> Op<'a, bool>;
    fn reseal<'a>(&'a self, key: &'a StoreKey, was: &'a Record, now: &'a Record) -> Op<'a, bool>;
    fn ping<'a>(&'a self, space: &'a str) -> Op<'a, ()>;
    fn set_control<'a>(
        &'a self,
        space: &'a str,
        route: &'a str,
        value: Option<&'a str>,
    ) -> Op<'a, ()>;
    fn controls<'a>(&'a self, space: &'a str) -> Op<'a, Vec<(String, String)>>;
    fn layout<'a>(&'a self, space: &'a str, scopes: &'a [String], wanted: u16) -> Op<'a, u16>;
    fn risks(
        &self,
        longest_retention: Duration,
    ) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>>;
    fn invalidations(&self) -> Invalidations;
    fn publish<'a>(&'a self, channel: &'a str, key: &'a str) -> Op<'a, ()>;
    fn is_local(&self) -> bool;
    fn observed(&self, answered: bool);
    fn size_bytes(&self) -> Option<u64>;
}

impl<B: Backend> DynBackend for B {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>, token: &'a str) -> Op<'a, ClaimOutcome> {
        Box::pin(Records::claim(self, request, token))
    }
    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        processing_ttl: Duration,
    ) -> Op<'a, bool> {
        Box::pin(Records::renew(self, key, token, processing_ttl))
    }
    fn complete<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        response: &'a RecordedResponse,
        retention: Duration,
    ) -> Op<'a, bool> {
        Box::pin(Records::complete(self, key, token, response, retention))
    }
    fn fail<'a>(
        &'a self,
        key: &'a StoreKey,
        token: &'a str,
        failure: &'a Failure<'a>,
    ) -> Op<'a, Option<RecordState>> {
        Box::pin(Records::fail(self, key, token, failure))
    }
    fn release<'a>(&'a self, key: &'a StoreKey, token: &'a str) -> Op<'a, bool> {
        Box::pin(Records::release(self, key, token))
    }
    fn lease_due<'a>(
        &'a self,
        source: &'a str,
        tokens: &'a [String],
        processing_ttl: Duration,
    ) -> Op<'a, Vec<Due>> {
        Box::pin(Queue::lease_due(self, source, tokens, processing_ttl))
    }
    fn lease_ordered<'a>(
        &'a self,
        source: &'a str,
        tokens: &'a [String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Op<'a, Leased> {
        Box::pin(Queue::lease_ordered(
            self,
            source,
            tokens,
            processing_ttl,
            rules,
        ))
    }
    fn list<'a>(&'a self, query: &'a ListQuery<'a>) -> Op<'a, Vec<(String, Record)>> {
        Box::pin(Listing::list(self, query))
    }
    fn count<'a>(&'a self, source: &'a str, state: RecordState) -> Op<'a, u64> {
        Box::pin(Listing::count(self, source, state))
    }
    fn queued<'a>(&'a self, source: &'a str) -> Op<'a, Queued> {
        Box::pin(Listing::queued(self, source))
    }
    fn trim<'a>(&'a self, source: &'a str, state: RecordState, before_ms: u64) -> Op<'a, u64> {
        Box::pin(Listing::trim(self, source, state, before_ms))
    }
    fn oldest<'a>(&'a self, source: &'a str, state: RecordState) -> Op<'a, Option<u64>> {
        Box::pin(Listing::oldest(self, source, state))
    }
    fn blocked<'a>(&'a self, source: &'a str, limit: usize) -> Op<'a, Vec<Blocked>> {
        Box::pin(Listing::blocked(self, source, limit))
    }
    fn get<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<Record>> {
        Box::pin(Records::get(self, key))
    }
    fn delete<'a>(&'a self, key: &'a StoreKey, force: bool) -> Op<'a, Deleted> {
        Box::pin(Records::delete(self, key, force))
    }
    fn export<'a>(&'a self, key: &'a StoreKey) -> Op<'a, Option<(Record, u64)>> {
        Box::pin(Transfer::export(self, key))
    }
    fn import<'a>(
        &'a self,
        key: &'a StoreKey,
        record: &'a Record,
        expires_at_ms: u64,
        guard: Option<&'a StoreKey>,
    ) -> Op<'a, bool> {
        Box::pin(Transfer::import(self, key, record, expires_at_ms, guard))
    }
    fn reseal<'a>(&'a self, key: &'a StoreKey, was: &'a Record, now: &'a Record) -> Op<'a, bool> {
        Box::pin(Transfer::reseal(self, key, was, now))
    }
    fn ping<'a>(&'a self, space: &'a str) -> Op<'a, ()> {
        Box::pin(Health::ping(self, space))
    }
    fn set_control<'a>(
        &'a self,
        space: &'a str,
        route: &'a str,
        value: Option<&'a str>,
    ) -> Op<'a, ()> {
        Box::pin(Fleet::set_control(self, space, route, value))
    }
    fn controls<'a>(&'a self, space: &'a str) -> Op<'a, Vec<(String, String)>> {
        Box::pin(Fleet::controls(self, space))
    }
    fn layout<'a>(&'a self, space: &'a str, scopes: &'a [String], wanted: u16) -> Op<'a, u16> {
        Box::pin(Fleet::layout(self, space, scopes, wanted))
    }
    fn risks(
        &self,
        longest_retention: Duration,
    ) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>> {
        Box::pin(Health::risks(self, longest_retention))
    }
    fn invalidations(&self) -> Invalidations {
        Fleet::invalidations(self)
    }
    fn publish<'a>(&'a self, channel: &'a str, key: &'a str) -> Op<'a, ()> {
        Box::pin(Fleet::publish(self, channel, key))
    }
    fn is_local(&self) -> bool {
        Health::is_local(self)
    }
    fn observed(&self, answered: bool) {
        Health::observed(self, answered)
    }
    fn size_bytes(&self) -> Option<u64> {
        Health::size_bytes(self)
    }
}
